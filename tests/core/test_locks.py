"""Kernel locks that die with their holder, exercised with real processes and real signals."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import psutil
import pytest
from firstmate.base.errors import LockTimeout, StateError, UsageError
from firstmate.store import identity
from firstmate.store.home import Home
from firstmate.store.locks import FileLock, OwnerRecord
from firstmate.testing import read_line
from firstmate.testing.procs import eventually
from hypothesis import given
from hypothesis import strategies as st

CORE = str(Path(__file__).resolve().parents[2] / "core")
DEADLINE = 20.0

# argv: lock path, home, wait ("block" or seconds), then optionally "grandchild".
# Prints "acquired <pid>" (or "timeout <holder_pid>"), holds until stdin closes, then releases.
HOLDER = """
import os, subprocess, sys
from pathlib import Path
from firstmate.base.errors import LockTimeout
from firstmate.store import locks
from firstmate.store.locks import FileLock
path, home, wait = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
if os.environ.get("HOLD_WITH_PORTALOCKER"):
    locks.prefer_portalocker()  # as a long-running process does
lock = FileLock(path, "test", home)
print("waiting", os.getpid(), flush=True)
try:
    lock.acquire(None if wait == "block" else float(wait))
except LockTimeout as exc:
    print("timeout", exc.holder_pid, flush=True)
    sys.exit(3)
print("acquired", os.getpid(), flush=True)
if sys.argv[4:] == ["grandchild"]:
    # close_fds=False: the grandchild inherits every inheritable descriptor of the holder.
    subprocess.Popen([sys.executable, "-c",
        "import os, sys; print('grandchild', os.getpid(), flush=True); sys.stdin.read()"],
        close_fds=False)
sys.stdin.read()
lock.release()
print("released", flush=True)
"""


def spawn_holder(path: Path, home: Path, wait: str = "block", *extra: str,
                 portalocker: bool = False) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": CORE}
    if portalocker:
        env["HOLD_WITH_PORTALOCKER"] = "1"
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), str(home), wait, *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )


def expect(proc: subprocess.Popen[bytes], word: str) -> list[str]:
    fields = read_line(proc).split()
    assert fields and fields[0] == word, f"expected {word!r} from pid {proc.pid}, got {fields}"
    return fields


@pytest.fixture
def lock_path(fm_home: Home) -> Path:
    return fm_home.lock_path("queue")


def new_lock(fm_home: Home, path: Path, role: str = "test") -> FileLock:
    return FileLock(path, role, fm_home.root)


def held_by_child(
    fm_home: Home, path: Path, procs: list[subprocess.Popen[bytes]], *extra: str
) -> subprocess.Popen[bytes]:
    child = spawn_holder(path, fm_home.root, "block", *extra)
    procs.append(child)
    expect(child, "waiting")
    assert int(expect(child, "acquired")[1]) == child.pid
    return child


# --- in one process ---------------------------------------------------------------------------


def test_acquire_writes_a_private_owner_record_and_release_clears_it(
    fm_home: Home, lock_path: Path
) -> None:
    lock = new_lock(fm_home, lock_path, "queue")
    assert lock.holder_state() == "free"
    assert not lock_path.exists(), "inspecting a free lock must not create its file"
    lock.acquire()
    try:
        assert lock.held
        assert stat.S_IMODE(lock_path.stat().st_mode) == 0o600
        rec = OwnerRecord.from_json(lock_path.read_bytes())
        assert rec is not None
        assert (rec.pid, rec.role, rec.home) == (os.getpid(), "queue", str(fm_home.root))
        assert rec.identity == identity.current().token()
        seen = new_lock(fm_home, lock_path).holder()
        assert seen is not None and seen.verified and seen.pid == os.getpid()
        assert new_lock(fm_home, lock_path).holder_state() == "held"
    finally:
        lock.release()
    assert not lock.held
    assert lock_path.read_bytes() == b""
    assert lock.holder_state() == "free"
    assert lock.holder() is None
    lock.release()  # releasing twice is harmless


def test_two_lock_objects_in_one_process_exclude_each_other(fm_home: Home, lock_path: Path) -> None:
    first, second = new_lock(fm_home, lock_path, "queue"), new_lock(fm_home, lock_path, "queue")
    first.acquire(timeout=0)
    with pytest.raises(LockTimeout) as caught:
        second.acquire(timeout=0)
    assert caught.value.holder_pid == os.getpid()
    assert caught.value.message == f"lock queue remains held by live pid {os.getpid()} after 0s"
    with pytest.raises(LockTimeout):
        second.acquire(timeout=0.05)
    assert not second.held
    first.release()
    second.acquire(timeout=0)
    assert second.held
    second.release()


def test_context_manager_holds_for_the_block(fm_home: Home, lock_path: Path) -> None:
    with new_lock(fm_home, lock_path) as lock:
        assert lock.held
        assert new_lock(fm_home, lock_path).holder_state() == "held"
    assert not lock.held
    assert new_lock(fm_home, lock_path).holder_state() == "free"


def test_double_acquire_is_a_programming_error(fm_home: Home, lock_path: Path) -> None:
    with new_lock(fm_home, lock_path) as lock, pytest.raises(RuntimeError):
        lock.acquire(timeout=0)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("-inf"), float("inf")])
def test_bad_wait_is_a_usage_error(fm_home: Home, lock_path: Path, bad: float) -> None:
    with pytest.raises(UsageError):
        new_lock(fm_home, lock_path).acquire(timeout=bad)


def test_symlinked_lock_path_is_refused(fm_home: Home, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"precious")
    link = fm_home.lock_path("evil")
    link.symlink_to(target)
    lock = new_lock(fm_home, link)
    with pytest.raises(StateError, match="symlink"):
        lock.acquire(timeout=0)
    with pytest.raises(StateError, match="symlink"):
        lock.holder_state()
    assert target.read_bytes() == b"precious"
    assert not lock.held


def test_dangling_symlink_is_refused_and_nothing_is_created(fm_home: Home, tmp_path: Path) -> None:
    target = tmp_path / "not-there"
    link = fm_home.lock_path("dangling")
    link.symlink_to(target)
    with pytest.raises(StateError):
        new_lock(fm_home, link).acquire()
    assert not target.exists()


def test_forked_copy_does_not_release_the_parents_lock(fm_home: Home, lock_path: Path) -> None:
    lock = new_lock(fm_home, lock_path)
    lock.acquire()
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the fork
            code = 0 if not lock.held else 1
            lock.release()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert lock.held
        with pytest.raises(LockTimeout):
            new_lock(fm_home, lock_path).acquire(timeout=0)
    finally:
        lock.release()


def test_importing_locks_stays_light() -> None:
    code = (
        "import sys, firstmate.store.locks\n"
        "print(sorted(m for m in ('psutil', 'portalocker', 'firstmate.store.identity') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": CORE}, timeout=60,
    )
    assert out.stdout.strip() == "[]"


# --- across processes -------------------------------------------------------------------------


def test_child_holder_is_named_and_bounded_wait_times_out(
    fm_home: Home, lock_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    child = held_by_child(fm_home, lock_path, procs)
    lock = new_lock(fm_home, lock_path, "queue")
    assert lock.holder_state() == "held"
    rec = lock.holder()
    assert rec is not None and rec.verified
    assert rec.pid == child.pid and rec.home == str(fm_home.root)
    with pytest.raises(LockTimeout) as caught:
        lock.acquire(timeout=0.3)
    assert caught.value.holder_pid == child.pid
    assert caught.value.waited >= 0.3
    assert caught.value.message == f"lock queue remains held by live pid {child.pid} after 0.3s"
    assert caught.value.exit_code == 1
    assert not lock.held
    # The holder lets go; a bounded wait then succeeds.
    assert child.stdin is not None
    child.stdin.close()
    lock.acquire(timeout=DEADLINE)
    assert lock.held
    lock.release()
    expect(child, "released")


def test_bounded_waiter_in_another_process_times_out_naming_the_holder(
    fm_home: Home, lock_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    holder = held_by_child(fm_home, lock_path, procs)
    waiter = spawn_holder(lock_path, fm_home.root, "0.2")
    procs.append(waiter)
    expect(waiter, "waiting")
    assert expect(waiter, "timeout")[1] == str(holder.pid)
    assert waiter.wait(timeout=DEADLINE) == 3


@pytest.mark.parametrize("wait", ["block", "600"])
def test_sigkill_of_the_holder_frees_the_lock_for_a_waiting_process(
    fm_home: Home, lock_path: Path, procs: list[subprocess.Popen[bytes]], wait: str
) -> None:
    holder = held_by_child(fm_home, lock_path, procs)
    waiter = spawn_holder(lock_path, fm_home.root, wait)
    procs.append(waiter)
    expect(waiter, "waiting")
    rec = new_lock(fm_home, lock_path).holder()
    assert rec is not None and rec.verified and rec.pid == holder.pid
    holder.kill()
    assert holder.wait(timeout=DEADLINE) == -signal.SIGKILL
    assert int(expect(waiter, "acquired")[1]) == waiter.pid
    rec = new_lock(fm_home, lock_path).holder()
    assert rec is not None and rec.verified and rec.pid == waiter.pid


COUNTER = """
import sys
from pathlib import Path
from firstmate.store.locks import FileLock
lock_path, home, counter, rounds, wait = sys.argv[1:6]
lock = FileLock(Path(lock_path), "test", Path(home))
for _ in range(int(rounds)):
    lock.acquire(None if wait == "block" else float(wait))
    n = int(Path(counter).read_text())
    Path(counter).write_text(str(n + 1))
    lock.release()
print("done", flush=True)
"""


def test_processes_never_lose_an_update_under_contention(
    fm_home: Home, lock_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    counter = fm_home.state / "counter"
    counter.write_text("0")
    waits = ["block", "600", "block", "600"]
    for wait in waits:
        procs.append(subprocess.Popen(
            [sys.executable, "-c", COUNTER, str(lock_path), str(fm_home.root), str(counter), "50",
             wait],
            stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": CORE},
        ))
    for proc in procs:
        expect(proc, "done")
        assert proc.wait(timeout=DEADLINE) == 0
    assert counter.read_text() == str(50 * len(waits))


def test_dead_holders_leftover_record_does_not_hold_the_lock(
    fm_home: Home, lock_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    holder = held_by_child(fm_home, lock_path, procs)
    holder.kill()
    holder.wait(timeout=DEADLINE)
    leftover = OwnerRecord.from_json(lock_path.read_bytes())
    assert leftover is not None and leftover.pid == holder.pid
    lock = new_lock(fm_home, lock_path)
    assert lock.holder_state() == "free"
    assert lock.holder() is None
    lock.acquire(timeout=0)
    lock.release()


def test_lock_is_not_inherited_by_a_grandchild(
    fm_home: Home, lock_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    holder = held_by_child(fm_home, lock_path, procs, "grandchild")
    grandchild = int(expect(holder, "grandchild")[1])
    try:
        fd_dir = Path(f"/proc/{grandchild}/fd")
        if fd_dir.is_dir():
            targets = {os.readlink(fd_dir / fd) for fd in os.listdir(fd_dir)}
            assert str(lock_path) not in targets
        holder.kill()
        holder.wait(timeout=DEADLINE)
        lock = new_lock(fm_home, lock_path)
        eventually("the lock being freed", lambda: lock.holder_state() == "free")
        assert identity.is_alive(grandchild)
        lock.acquire(timeout=0)
        assert identity.is_alive(grandchild)
        lock.release()
    finally:
        try:
            gc = psutil.Process(grandchild)
            gc.kill()
            gc.wait(timeout=DEADLINE)
        except psutil.Error:
            pass


def _record_for(child_pid: int, identity_token: str, fm_home: Home) -> bytes:
    rec = OwnerRecord(pid=child_pid, identity=identity_token, home=str(fm_home.root), role="test",
                      acquired_at=time.time())
    return rec.to_json().encode()


def _forged_identity(pid: int) -> str:
    real = identity.identity_of(pid)
    assert real is not None
    return attrs.evolve(real, started=real.started + 5).token()


@pytest.mark.parametrize(
    ("content", "names_child"),
    [
        pytest.param(lambda pid, home: b"\x00\xffnot json{", False, id="garbage"),
        pytest.param(lambda pid, home: b"", False, id="empty"),
        pytest.param(lambda pid, home: b"[1, 2, 3]", False, id="not-an-object"),
        pytest.param(lambda pid, home: f'{{"pid": {pid}, "identity": "'.encode(), True,
                     id="truncated"),
        pytest.param(lambda pid, home: _record_for(pid, "nonsense", home), True, id="bad-token"),
        pytest.param(lambda pid, home: _record_for(pid, _forged_identity(pid), home), True,
                     id="reused-pid"),
        pytest.param(lambda pid, home: _record_for(pid, identity.current().token(), home), True,
                     id="someone-elses-identity"),
    ],
)
def test_unverifiable_owner_record_is_held_unverified(
    fm_home: Home,
    lock_path: Path,
    procs: list[subprocess.Popen[bytes]],
    content: Callable[[int, Home], bytes],
    names_child: bool,
) -> None:
    child = held_by_child(fm_home, lock_path, procs)
    lock_path.write_bytes(content(child.pid, fm_home))
    lock = new_lock(fm_home, lock_path)
    assert lock.holder_state() == "held-unverified"
    rec = lock.holder()
    assert rec is not None and not rec.verified
    assert rec.known_pid == (child.pid if names_child else None)
    with pytest.raises(LockTimeout) as caught:
        lock.acquire(timeout=0)
    assert caught.value.holder_pid == (child.pid if names_child else None)
    assert "remains held by" in caught.value.message
    assert str(child.pid) in caught.value.message or not names_child
    assert "live pid" not in caught.value.message


# --- owner records ----------------------------------------------------------------------------


def test_owner_record_round_trips() -> None:
    rec = OwnerRecord(pid=12, identity="12:1.00:0123456789abcdef", home="/h", role="watch",
                      acquired_at=1700000000.25)
    assert OwnerRecord.from_json(rec.to_json()) == rec
    assert OwnerRecord.from_json(rec.to_json().encode()) == rec
    assert "verified" not in json.loads(rec.to_json())


@pytest.mark.parametrize(
    "data",
    [
        "", "null", "12", '"x"', "[]", "{}", b"\xff\xfe", '{"pid": "12"}',
        '{"pid": 0, "identity": "", "home": "", "role": "", "acquired_at": 1}',
        '{"pid": -3, "identity": "", "home": "", "role": "", "acquired_at": 1}',
        '{"pid": true, "identity": "", "home": "", "role": "", "acquired_at": 1}',
        '{"pid": 3, "identity": 5, "home": "", "role": "", "acquired_at": 1}',
        '{"pid": 3, "identity": "", "home": "", "role": "", "acquired_at": "1"}',
        '{"pid": 3, "identity": "", "home": "", "role": "", "acquired_at": NaN}',
        '{"pid": 3, "identity": "", "home": "", "role": "", "acquired_at": false}',
        '{"pid": 3, "identity": "", "home": ""}',
        "[" * 100000,
    ],
)
def test_malformed_owner_records_are_none(data: str | bytes) -> None:
    assert OwnerRecord.from_json(data) is None


@given(st.one_of(st.text(max_size=300), st.binary(max_size=300)))
def test_owner_record_parsing_never_raises(data: str | bytes) -> None:
    OwnerRecord.from_json(data)


# --- portalocker in long-running processes ------------------------------------------------------


def test_a_portalocker_holder_and_a_short_commands_flock_exclude_each_other(
    fm_home: Home, lock_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    child = spawn_holder(lock_path, fm_home.root, "block", portalocker=True)
    procs.append(child)
    expect(child, "waiting")
    expect(child, "acquired")
    mine = new_lock(fm_home, lock_path)
    with pytest.raises(LockTimeout) as caught:
        mine.acquire(0)
    assert caught.value.holder_pid == child.pid
    assert child.stdin is not None
    child.stdin.close()
    expect(child, "released")
    mine.acquire(DEADLINE)
    try:
        other = spawn_holder(lock_path, fm_home.root, "0.2", portalocker=True)
        procs.append(other)
        expect(other, "waiting")
        assert expect(other, "timeout")[1] == str(os.getpid())
    finally:
        mine.release()


PROBE = """
import sys
from firstmate.cli import main
from firstmate.store import locks
try:
    main.dispatch(sys.argv[1:])
except SystemExit:
    pass
print("portalocker" if locks.uses_portalocker() else "flock", flush=True)
"""


@pytest.mark.parametrize(("argv", "expected"), [(["top", "--once"], "portalocker"),
                                                (["status"], "flock"),
                                                (["wake", "append", "check", "k", "check: k"],
                                                 "flock")])
def test_long_running_commands_lock_through_portalocker(
    fm_home: Home, argv: list[str], expected: str
) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": CORE}, timeout=120, check=False)
    assert done.stdout.split()[-1] == expected, (done.stdout, done.stderr)


def test_a_bounded_wait_tries_at_least_once_and_gives_up_at_its_bound() -> None:
    from firstmate.base import ownerlock

    calls: list[int] = []
    assert not ownerlock.poll(lambda: bool(calls.append(1)), 0.0)
    assert calls == [1]
    answers = iter([False, False, True])
    assert ownerlock.poll(lambda: next(answers), DEADLINE)
    start = time.monotonic()
    assert not ownerlock.poll(lambda: False, 0.1)
    assert 0.1 <= time.monotonic() - start < DEADLINE
