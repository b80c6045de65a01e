"""Direct mode: the watcher an arm started writes its reason line to the arm's stdout itself.

Real arms and watchers: the line reaches the arm's reader while the arm is stopped (so it did
not relay it), exactly once; an arm that heard of a direct reason that was never said to be sent
writes it itself; and a watcher whose arm is gone lets go of that stream at once.
"""

from __future__ import annotations

import io
import os
import select
import signal
import subprocess
import sys
import time

from firstmate.continuity.arm import Arm
from firstmate.continuity.watchchild import Child
from firstmate.store import cyclelog
from firstmate.store.database import Store
from firstmate.store.identity import current
from firstmate.testing.procs import eventually
from firstmate.watch.directline import DIRECT_PREFIX, DIRECT_SENT
from watch_support import DEADLINE, Rig, alive, rig, started_pid

__all__ = ["rig"]


#: Kernel waits that mean "blocked in poll/select".
_WAITING = ("do_select", "do_sys_poll", "poll_schedule_timeout", "core_sys_select")


def _waiting(pid: int) -> bool:
    with open(f"/proc/{pid}/wchan") as file:
        return file.read().startswith(_WAITING)


def test_the_reason_line_reaches_the_arms_reader_while_the_arm_is_stopped(rig: Rig) -> None:
    arm = rig.spawn("arm")
    watcher = started_pid(arm.line())
    # Its go is said right after the status line, before it waits on its watcher's exit.
    eventually("the arm to wait on its watcher", lambda: _waiting(arm.pid))
    os.kill(arm.pid, signal.SIGSTOP)
    try:
        rig.append("check", "direct", "check: written by the watcher")
        # The arm cannot run: only the watcher can have written this line to its stdout.
        assert arm.line() == "check: written by the watcher"
        eventually("the watcher to exit", lambda: not alive(watcher))
    finally:
        os.kill(arm.pid, signal.SIGCONT)
    assert arm.wait() == 0
    assert arm.rest() == []  # the arm heard it was sent: no second copy
    rows = [row for row in cyclelog.rows(rig.home) if row.arm_pid == arm.pid]
    assert [(row.origin, row.reason) for row in rows] == [("started", "actionable-check")]


def _arm_with_child(rig: Rig, printed: bytes) -> tuple[Arm, io.StringIO]:
    """An arm in this process whose child already printed *printed* and exited."""
    child = subprocess.Popen([sys.executable, "-c",
                              f"import os; os.write(1, {printed!r})"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    assert child.stdout is not None
    out_fd = child.stdout.fileno()
    os.set_blocking(out_fd, False)
    out = io.StringIO()
    arm = Arm(rig.home, rig.env, out, current(), Store(rig.home))
    arm.child = Child(child, None, time.time(), out_fd=out_fd)
    return arm, out


def test_a_direct_reason_never_said_to_be_sent_is_written_by_the_arm(rig: Rig) -> None:
    # The watcher died between naming its reason and writing it (or the write failed).
    arm, out = _arm_with_child(rig, f"{DIRECT_PREFIX}check: a\n".encode())
    try:
        assert arm.child_closed() == 0
    finally:
        arm.db.close()
    assert out.getvalue() == "check: a\n"
    assert arm.reason == "check: a"


def test_a_direct_reason_said_to_be_sent_is_not_written_again(rig: Rig) -> None:
    arm, out = _arm_with_child(rig, f"{DIRECT_PREFIX}check: b\n{DIRECT_SENT}\n".encode())
    try:
        assert arm.child_closed() == 0
    finally:
        arm.db.close()
    assert out.getvalue() == ""
    assert arm.reason == "check: b"


def test_a_line_that_only_looks_direct_is_no_reason(rig: Rig) -> None:
    arm, out = _arm_with_child(rig, f"{DIRECT_PREFIX}not a reason\ncheck: c\n".encode())
    try:
        assert arm.child_closed() == 0
    finally:
        arm.db.close()
    assert out.getvalue() == "check: c\n"


def test_a_watcher_lets_go_of_a_killed_arms_stdout(rig: Rig) -> None:
    arm = rig.spawn("arm")
    watcher = started_pid(arm.line())
    os.kill(arm.pid, signal.SIGKILL)
    arm.wait()
    # The stream ends although the watcher lives on: it held a copy only for its reason line.
    stdout = arm.popen.stdout
    assert stdout is not None
    end = time.monotonic() + DEADLINE
    while True:
        left = end - time.monotonic()
        assert left > 0, "the killed arm's stdout never ended: its watcher still holds it"
        ready, _, _ = select.select([stdout], [], [], left)
        if ready and not os.read(stdout.fileno(), 4096):
            break
    assert alive(watcher)


def test_an_arm_without_a_stdout_file_passes_no_direct_descriptors(rig: Rig) -> None:
    # Its stream is a caller's object: no copy to give, and a value it inherited is not passed.
    env = {**rig.env, "FM_WATCH_DIRECT_FD": "7,8"}
    arm = Arm(rig.home, env, io.StringIO(), current(), Store(rig.home))
    try:
        arm.spawn()
        assert arm.child is not None
        pid = arm.child.pid
        with open(f"/proc/{pid}/environ", "rb") as file:
            environ = file.read().split(b"\0")
        assert not any(item.startswith(b"FM_WATCH_DIRECT_FD=") for item in environ)
        assert arm.child.go is None
    finally:
        if arm.child is not None:
            arm.child.proc.kill()
            arm.child.proc.wait()
            arm.child.close()
        arm.db.close()
