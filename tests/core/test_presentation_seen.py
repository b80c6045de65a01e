"""The primary is never woken for what it has already seen, with real processes.

``fm wake drain`` shows the crews' unread status lines and open decisions; what it showed is
marked (the crew's drain cursor, written once the lines are out) and the watcher's status source
reads on from that mark, so the next ``fm arm`` does not close at once on lines the captain read
and a decision it answered. Still exactly once: a line written while the drain runs, after it
read the logs, wakes the next watcher; a drain killed before its mark leaves everything to be
shown and woken again. Both drain paths (the standard-library fast path and the full path,
``--json``) behave alike.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from firstmate.store import crew
from firstmate.store.home import Home
from firstmate.testing.procs import DEADLINE, fm_command, spawn_arm
from wakeq_support import child_env, fm, raw

ACK = re.compile(r"WAKE_ACK_REQUIRED: after handling completes run fm wake drain (.*)$", re.M)
ENV = {"FM_SIGNAL_GRACE": "0", "FIRSTMATE_PLUGINS": "none"}


@pytest.fixture
def home(fm_home: Home, tmp_path: Path) -> Home:
    for name, pane in (("alpha", "%1"), ("beta", "%2")):
        assert fm(fm_home, "crew", "add", name, "--pane", pane, FM_TMUX=str(tmp_path / "no-tmux"),
                  ).returncode == 0
    return fm_home


def run(home: Home, *args: str) -> subprocess.CompletedProcess[str]:
    done = fm(home, *args, **ENV)
    assert done.returncode == 0, done.stderr
    return done


def acknowledge(home: Home, drained: subprocess.CompletedProcess[str]) -> None:
    found = ACK.search(drained.stderr)
    assert found is not None, drained.stderr
    run(home, "wake", "drain", *found.group(1).split())


def test_the_issue_sequence_read_lines_and_an_answered_decision_do_not_wake(
        home: Home, tmp_path: Path) -> None:
    # Two crews report while no watcher runs (and something is queued: the drain owes an ack).
    run(home, "crew", "status", "alpha", "done: second report")
    run(home, "crew", "status", "beta", "needs-decision: key=x choose A or B")
    run(home, "wake", "append", "check", "ci", "check: ci: green")
    drained = run(home, "wake", "drain")
    unread = drained.stdout.split("UNREAD STATUS", 1)[1]
    assert "alpha done: second report" in unread
    assert "beta needs-decision: key=x choose A or B" in unread
    acknowledge(home, drained)
    assert run(home, "crew", "answer", "beta", "--key", "x", "A").stdout.startswith("crew: answered")
    arm = spawn_arm(home, tmp_path)
    try:
        assert arm.status.startswith("watcher: started")
        # Whatever the watcher's first polls saw, it may wake only for what comes next.
        run(home, "crew", "status", "alpha", "done: third report")
        assert arm.wait_reason() == "signal: alpha.status: done: third report"
        assert arm.wait() == 0
    finally:
        arm.stop()
    again = run(home, "wake", "drain")
    assert "alpha done: second report" not in again.stdout  # not re-printed
    assert "needs-decision" not in again.stdout  # answered: closed everywhere


def _filled(home: Home, rows: int = 1500) -> None:
    """Enough queued rows that a drain's output fills a pipe nobody reads (~270 KB)."""
    with raw(home) as conn:
        conn.executemany(
            "INSERT INTO wakes (seq, at, kind, key, payload) VALUES (?, 1.0, 'check', ?, ?)",
            [(seq, f"k{seq}", "check: " + "x" * 160) for seq in range(1, rows + 1)])


def _blocked_drain(home: Home, args: list[str]) -> subprocess.Popen[bytes]:
    """A drain started with its stdout unread: once its first byte is out it has read the crews'
    logs (both paths read them before printing anything) and it blocks on the full pipe, with
    its mark not yet written."""
    drain = subprocess.Popen(fm_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=child_env(home, **ENV))
    assert drain.stdout is not None
    first = os.read(drain.stdout.fileno(), 1)  # (unbuffered: communicate reads the fd itself)
    assert first
    assert drain.poll() is None  # ~270 KB still to write: it cannot have finished
    drain.first = first  # type: ignore[attr-defined]
    return drain


@pytest.mark.parametrize("args", [["wake", "drain"], ["wake", "drain", "--json"]],
                         ids=["fast path", "full path"])
def test_a_line_written_during_the_drain_wakes_and_the_lines_it_showed_do_not(
        home: Home, tmp_path: Path, args: list[str]) -> None:
    run(home, "crew", "status", "alpha", "done: before the drain")
    run(home, "crew", "status", "beta", "blocked: before the drain too")
    _filled(home)
    drain = _blocked_drain(home, args)
    run(home, "crew", "status", "alpha", "done: during the drain")
    out, err = drain.communicate(timeout=DEADLINE)
    assert drain.returncode == 0, err
    text = (drain.first + out).decode()  # type: ignore[attr-defined]
    assert "before the drain" in text and "during the drain" not in text
    arm = spawn_arm(home, tmp_path)
    try:
        assert arm.wait_reason() == "signal: alpha.status: done: during the drain"
    finally:
        arm.stop()


@pytest.mark.parametrize("args", [["wake", "drain"], ["wake", "drain", "--json"]],
                         ids=["fast path", "full path"])
def test_a_drain_killed_before_its_mark_loses_nothing(home: Home, tmp_path: Path,
                                                      args: list[str]) -> None:
    run(home, "crew", "status", "alpha", "done: shown to a drain that died")
    _filled(home)
    drain = _blocked_drain(home, args)
    drain.send_signal(signal.SIGKILL)
    drain.communicate(timeout=DEADLINE)
    assert not crew.path(home, "alpha", crew.DRAIN_CURSOR).exists()
    arm = spawn_arm(home, tmp_path)
    try:
        assert arm.wait_reason() == "signal: alpha.status: done: shown to a drain that died"
    finally:
        arm.stop()
    again = run(home, "wake", "drain")
    assert "done: shown to a drain that died" in again.stdout  # presented again
