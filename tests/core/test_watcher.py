"""The watcher process: one cycle, one reason line, durable before printed, clean on signals."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from firstmate.store import cyclelog, deliveries, episodes
from firstmate.store.database import kv_get, open_store
from firstmate.store.doorbell import Doorbell, address
from firstmate.store.health import watcher_health
from firstmate.store.home import Home
from firstmate.testing.procs import eventually
from firstmate.watch.sources.queued import WATERMARK_KEY, reason_line
from firstmate.watch.watcher import disposable_checkout, missing_ground, predecessor_arm_pid
from watch_support import (
    CORE,
    Proc,
    Rig,
    alive,
    episode,
    hold_lock,
    let_one_go,
    make_rig,
    rig,
    started_pid,
)

__all__ = ["rig"]


def _kv(home: Home, key: str) -> str | None:
    db = open_store(home)
    try:
        with db.reading() as conn:
            return kv_get(conn, key)
    finally:
        db.close()


def test_arm_starts_a_watcher_and_relays_an_appended_wake(rig: Rig) -> None:
    # FM_POLL far beyond the test's deadline: only the doorbell can deliver this wake in time.
    arm = rig.spawn("arm", env={"FM_POLL": "3600"})
    pid = started_pid(arm.line())
    seq = rig.append("check", "build", "check: build finished")
    assert arm.line() == "check: build finished"
    assert arm.wait() == 0
    assert arm.rest() == []
    eventually("the watcher to exit", lambda: not alive(pid))
    db = open_store(rig.home)
    with db.reading() as conn:
        record = deliveries.recent(conn, 1)[0]
    db.close()
    assert (record.watcher_pid, record.reason) == (pid, "check: build finished")
    assert record.identity.startswith(f"{pid}:")
    assert _kv(rig.home, WATERMARK_KEY) == str(seq)
    row = cyclelog.rows(rig.home)[-1]
    assert (row.watcher_pid, row.origin, row.reason, row.exit_code) == (
        pid, "started", "actionable-check", 0)
    assert watcher_health(rig.home, rig.env).state == "none"


def test_a_crew_done_line_closes_the_cycle_with_a_durable_signal_row(rig: Rig) -> None:
    assert rig.fm("crew", "add", "c1", "--pane", "%99").returncode == 0
    arm = rig.spawn("arm")
    started_pid(arm.line())
    assert rig.fm("crew", "status", "c1", "done: tests pass").returncode == 0
    reason = arm.line()
    assert reason.startswith("signal:") and "done: tests pass" in reason
    assert arm.wait() == 0
    db = open_store(rig.home)
    with db.reading() as conn:
        rows = conn.execute("SELECT kind, payload FROM wakes").fetchall()
    db.close()
    assert rows == [("signal", reason)]


def test_a_burst_from_five_crews_closes_one_cycle_whose_drain_shows_all_five(rig: Rig) -> None:
    """At the default coalescing (FM_SIGNAL_GRACE unset): five crews report within two
    seconds; one cycle closes, its one row names them all, and the drain shows every line."""
    crews = [f"c{i}" for i in range(1, 6)]
    for name in crews:
        assert rig.fm("crew", "add", name, "--pane", "%99").returncode == 0
    defaults = {"FM_SIGNAL_GRACE": "", "FM_SIGNAL_QUIET": "", "FM_SIGNAL_URGENT_QUIET": ""}
    arm = rig.spawn("arm", env=defaults)
    started_pid(arm.line())
    for name in crews:  # one `fm crew status` after another: well within two seconds
        assert rig.fm("crew", "status", name, f"done: {name} finished").returncode == 0
    reason = arm.line()
    assert reason.startswith("signal: c") and "(with " in reason
    assert all(name in reason for name in crews), reason
    assert arm.wait() == 0
    db = open_store(rig.home)
    with db.reading() as conn:
        assert conn.execute("SELECT count(*) FROM wakes").fetchone()[0] == 1
    db.close()
    drained = rig.fm("wake", "drain")
    assert drained.returncode == 0
    for name in crews:
        assert f"done: {name} finished" in drained.stdout, drained.stdout


def test_rows_wake_a_handling_successor_once_and_a_predecessor_row_never(rig: Rig) -> None:
    first = rig.spawn("arm")
    started_pid(first.line())
    rig.append("check", "one", "check: one")
    assert first.line() == "check: one"
    assert first.wait() == 0
    # Appended during the handover, while no watcher runs: the successor wakes for it once.
    rig.append("check", "two", "check: two")
    second = rig.spawn("arm", env={"FM_WATCH_PREDECESSOR_ARM_PID": str(first.pid)})
    assert " recovery-generation=" in second.line()
    assert second.line() == "check: two"
    assert second.wait() == 0
    third = rig.spawn("arm", env={"FM_WATCH_PREDECESSOR_ARM_PID": str(second.pid)})
    assert third.line().startswith("watcher: started pid=")
    rig.append("check", "three", "check: three")
    assert third.line() == "check: three"
    assert third.wait() == 0


def _held(rig: Rig, seq: int) -> bool:
    log = rig.home.logs / "triage.log"
    return log.exists() and f"queued: row {seq} waits up to " in log.read_text()


def _undrained_handover(rig: Rig, hold: str) -> tuple[Proc, Proc]:
    """A home whose primary drains, its newest wake delivered and not yet drained, and the
    handling successor of that wake's arm: (that arm, the successor)."""
    first = rig.spawn("arm")
    started_pid(first.line())
    rig.append("check", "one", "check: one")
    assert first.line() == "check: one"
    assert first.wait() == 0
    assert "check: one" in rig.fm("wake", "drain").stdout
    # After that drain, the next row wakes the successor at once, however long the hold.
    second = rig.spawn("arm", env={"FM_WATCH_PREDECESSOR_ARM_PID": str(first.pid),
                                   "FM_HANDOVER_HOLD": "3600"})
    assert second.line().startswith("watcher: started pid=")
    rig.append("check", "two", "check: two")
    assert second.line() == "check: two"
    assert second.wait() == 0
    third = rig.spawn("arm", env={"FM_WATCH_PREDECESSOR_ARM_PID": str(second.pid),
                                  "FM_HANDOVER_HOLD": hold})
    assert third.line().startswith("watcher: started pid=")
    return second, third


def test_a_handling_successor_leaves_to_the_drain_what_arrived_before_it(rig: Rig) -> None:
    # "two" was delivered and not yet drained: the primary's drain of it will show "three"
    # too, so waking the primary for "three" would wake it for a row it has seen.
    _, third = _undrained_handover(rig, "3600")
    seq = rig.append("check", "three", "check: three")
    eventually("the successor to hold the row", lambda: _held(rig, seq))
    drained = rig.fm("wake", "drain").stdout
    assert "check: two" in drained and "check: three" in drained, drained
    # The drain rang; the held row is presented. The next row is the successor's wake.
    rig.append("check", "four", "check: four")
    assert third.line() == "check: four"
    assert third.wait() == 0


@pytest.mark.parametrize("drain", [(), ("--json",)], ids=["fast", "json"])
def test_a_handling_successor_leaves_to_the_drain_a_crew_line_that_arrived_before_it(
        rig: Rig, drain: tuple[str, ...]) -> None:
    # As with a row: the primary's drain of "two" shows the crew's unread line too (the
    # fast drain and the store's full one, which --json takes).
    assert rig.fm("crew", "add", "c1", "--pane", "%99").returncode == 0
    _, third = _undrained_handover(rig, "3600")
    assert rig.fm("crew", "status", "c1", "done: tests pass").returncode == 0
    log = rig.home.logs / "triage.log"
    eventually("the successor to hold the crew's line", lambda: log.exists()
               and "status: c1.status waits up to " in log.read_text())
    drained = rig.fm("wake", "drain", *drain).stdout
    assert "check: two" in drained and "done: tests pass" in drained, drained
    # The drain marked the line presented before it rang: the successor does not wake for it,
    # and the crew's next line is its wake.
    assert rig.fm("crew", "status", "c1", "done: second").returncode == 0
    reason = third.line()
    assert "done: second" in reason and "tests pass" not in reason, reason
    assert third.wait() == 0


def test_a_held_check_is_not_run_again_until_the_drain_and_then_wakes(rig: Rig) -> None:
    # A check's wake is appended at the close: made during the hold, the drain would show it
    # and the primary would then be woken for a row it has read. Held, it goes out after.
    _, third = _undrained_handover(rig, "3600")
    runs = rig.tmp / "runs"
    assert rig.fm("check", "add", "disk", "--", "sh", "-c",
                  f"echo run >> '{runs}'; echo 'disk full'").returncode == 0
    log = rig.home.logs / "triage.log"
    eventually("the successor to hold the check's wake", lambda: log.exists()
               and "checks: check:disk waits up to " in log.read_text())
    # Nothing to wait for but time: a held source is not polled (a check would run on every
    # look, and its own deadline, already due, would have the watcher look at once, again).
    time.sleep(1.0)
    assert runs.read_text().count("run") == 1
    drained = rig.fm("wake", "drain").stdout
    assert "check: two" in drained and "disk full" not in drained, drained
    assert third.line() == "check: disk: disk full"
    assert third.wait() == 0
    assert runs.read_text().count("run") == 2  # once more, when the drain released it


def test_a_handover_hold_runs_out_when_the_primary_does_not_drain(rig: Rig) -> None:
    _, third = _undrained_handover(rig, "1")
    seq = rig.append("check", "three", "check: three")
    # Held for the drain that never comes, then woken for: nothing is lost.
    assert third.line() == "check: three"
    assert third.wait() == 0
    assert _held(rig, seq)


def test_without_its_doorbell_the_watcher_falls_back_to_polling(rig: Rig) -> None:
    # A directory at the bell's path (never removed by fm) leaves nowhere to bind it.
    blocker = Path(address(rig.home))
    blocker.mkdir()
    (blocker / "keep").write_text("")
    assert not Doorbell(rig.home).open()
    arm = rig.spawn("arm", env={"FM_POLL": "0.2"})
    started_pid(arm.line())
    rig.append("check", "poll", "check: found by polling")
    assert arm.line() == "check: found by polling"
    assert arm.wait() == 0
    assert (blocker / "keep").exists()


def test_term_during_a_hanging_pane_capture_ends_the_watcher(rig: Rig) -> None:
    pidfile = rig.tmp / "tmux.pid"
    fake = rig.tmp / "fake-tmux"
    fake.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 600\n")
    fake.chmod(0o755)
    assert rig.fm("crew", "add", "c1", "--pane", "%1").returncode == 0
    watch = rig.spawn("watch", env={"FM_TMUX": str(fake), "FM_TMUX_TIMEOUT": "600"})
    eventually("a pane capture to start", lambda: pidfile.exists() and pidfile.read_text().strip())
    capture = int(pidfile.read_text())
    watch.popen.send_signal(signal.SIGTERM)
    assert watch.wait() == 143
    eventually("the pane capture to be killed", lambda: not alive(capture))
    assert watcher_health(rig.home, rig.env).state == "none"


def test_a_ring_polls_only_what_rings_it_never_the_slow_pane_reads(rig: Rig) -> None:
    # Every tmux call takes a while and is logged: the first (full) poll makes some; a wake
    # rung in afterwards must be delivered without another one in between.
    log = rig.tmp / "tmux.log"
    fake = rig.tmp / "slow-tmux"
    fake.write_text(f"#!/bin/sh\necho start >> {log}\nsleep 0.3\necho end >> {log}\n")
    fake.chmod(0o755)
    assert rig.fm("crew", "add", "c1", "--pane", "%1").returncode == 0
    arm = rig.spawn("arm", env={"FM_TMUX": str(fake), "FM_POLL": "3600"})
    started_pid(arm.line())

    def calls() -> list[str]:
        return log.read_text().split() if log.exists() else []

    # The first poll lists the panes (a listing that does not name the crew's pane says it is
    # gone: it is not read).
    eventually("the first poll's tmux call to finish", lambda: calls().count("end") == 1)
    made = calls()
    assert made == ["start", "end"]
    rig.append("check", "build", "check: build finished")
    assert arm.line() == "check: build finished"
    assert arm.wait() == 0
    assert calls() == made  # the ring ran no pane read


#: A watcher whose queued source fails to read its rows while the file FLAG exists; every
#: call is logged to CALLS (``poll``, then ``looked`` or ``failed`` for each look).
LOOK_FAILS = """
import os, sys
from firstmate.watch import watcher
from firstmate.watch.sources.queued import QueuedSource

flag, calls = sys.argv[1], sys.argv[2]
looked, polled = QueuedSource.look, QueuedSource.poll

def log(word):
    with open(calls, "a") as out:
        out.write(word + "\\n")

def look(self, successor, context):
    failing = os.path.exists(flag)
    log("failed" if failing else "looked")
    if failing:
        raise RuntimeError("the rows could not be read")
    return looked(self, successor, context)

def poll(self, ctx):
    log("poll")
    return polled(self, ctx)

QueuedSource.look, QueuedSource.poll = look, poll
raise SystemExit(watcher.run())
"""


def test_a_rings_look_that_fails_is_polled_again_reported_once_and_loses_no_row(
        rig: Rig) -> None:
    flag, log = rig.tmp / "failing", rig.tmp / "calls"
    err_path = rig.tmp / "stderr-look-fails.txt"
    with open(err_path, "wb") as err:
        popen = subprocess.Popen([sys.executable, "-c", LOOK_FAILS, str(flag), str(log)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                 env={**rig.env, "FM_POLL": "3600"})
    watch = Proc(popen, err_path)
    rig.procs.append(watch)

    def calls() -> list[str]:
        return log.read_text().split() if log.exists() else []

    eventually("the first poll's look", lambda: "looked" in calls())
    first = len(calls())
    flag.touch()
    rig.append("check", "a", "check: first")
    note = "watcher: source queued failed: RuntimeError: the rows could not be read"
    eventually("the failure to be reported", lambda: note in watch.stderr())
    # The ring's own look failed; the pass then polled the source again, which failed too and
    # was reported through the path every source's failure takes.
    assert calls()[first:] == ["failed", "poll", "failed"]
    flag.unlink()
    rig.append("check", "b", "check: second")
    assert watch.line() == "check: first"  # the row that came during the failure, not lost
    assert watch.wait() == 0
    assert watch.stderr().count(note) == 1
    assert calls()[first + 3:] == ["looked"]  # the next ring's look found it


def _gated_arm(rig: Rig) -> tuple[Proc, Path, Callable[[], list[str]]]:
    """An arm over three crews whose every tmux call waits until the test lets it go
    (:func:`_let_one_go`); also the gate and the calls made so far (``list-panes``, …). The
    listing fails (tmux cannot say which panes exist), so every pane is read."""
    log = rig.tmp / "tmux.log"
    gate = rig.tmp / "gate"
    os.mkfifo(gate)
    fake = rig.tmp / "gated-tmux"
    fake.write_text(f'#!/bin/sh\necho "$1 $$" >> {log}\nread line < {gate}\n'
                    '[ "$1" = list-panes ] && exit 1\nexit 0\n')
    fake.chmod(0o755)
    for n in (1, 2, 3):
        assert rig.fm("crew", "add", f"c{n}", "--pane", f"%{n}").returncode == 0
    arm = rig.spawn("arm", env={"FM_TMUX": str(fake), "FM_TMUX_TIMEOUT": "600", "FM_POLL": "3600",
                                "FM_STALE_SLICE_MS": "600000"})

    def calls() -> list[str]:
        return log.read_text().split()[::2] if log.exists() else []

    return arm, gate, calls


def test_a_row_appended_while_tmux_lists_the_panes_wakes_without_waiting_for_it(rig: Rig) -> None:
    # The pane listing never returns here: the row still closes the cycle, and the watcher's
    # close ends the listing (no tmux call outlives it).
    arm, gate, calls = _gated_arm(rig)
    try:
        started_pid(arm.line())
        eventually("the pane listing to start", lambda: calls() == ["list-panes"])
        listing = int((rig.tmp / "tmux.log").read_text().split()[1])
        rig.append("check", "build", "check: build finished")
        assert arm.line() == "check: build finished"
        assert arm.wait() == 0
        eventually("the pane listing to be ended", lambda: not alive(listing))
        assert calls() == ["list-panes"]
    finally:
        for _ in range(3):  # (a failing run may leave a call waiting)
            let_one_go(gate)


def test_a_row_appended_during_a_pass_over_the_panes_wakes_before_the_rest_is_read(rig: Rig) -> None:
    # A row appended while the first poll is reading the panes closes the cycle as soon as the
    # read under way returns: the rest of the fleet is not read first, though the slice would
    # allow it.
    arm, gate, calls = _gated_arm(rig)
    try:
        started_pid(arm.line())
        eventually("the pane listing", lambda: let_one_go(gate))
        eventually("the first pane read", lambda: calls() == ["list-panes", "capture-pane"])
        rig.append("check", "build", "check: build finished")
        eventually("the first pane read to wait", lambda: let_one_go(gate))
        assert arm.line() == "check: build finished"
        assert arm.wait() == 0
        assert calls() == ["list-panes", "capture-pane"]
    finally:
        for _ in range(3):  # (a failing run may leave a call waiting)
            let_one_go(gate)


def test_a_watcher_stands_down_for_a_healthy_peer_without_touching_its_cycle(rig: Rig) -> None:
    arm = rig.spawn("arm")
    pid = started_pid(arm.line())
    done = rig.fm("watch")
    assert (done.returncode, done.stdout) == (0, f"watcher: already running pid={pid}\n")
    assert rig.healthy_pid() == pid


def test_a_live_foreign_holder_of_the_singleton_fails_the_start_after_the_bound(rig: Rig) -> None:
    holder = hold_lock(rig, "watch")
    done = rig.fm("watch", env={"FM_WATCHER_STARTUP_LOCK_BOUND": "1"})
    assert done.returncode == 1
    assert done.stdout == f"watcher: FAILED - startup lock held by live pid {holder.pid}\n"
    arm = rig.spawn("arm", env={"FM_WATCHER_STARTUP_LOCK_BOUND": "1"})
    assert arm.line() == f"watcher: FAILED - startup lock held by live pid {holder.pid}"
    assert arm.wait() == 1


def test_term_during_a_hanging_check_kills_its_group_and_publishes_downtime(rig: Rig) -> None:
    pidfile = rig.tmp / "check.pid"
    added = rig.fm("check", "add", "hang", "--", "sh", "-c", f"echo $$ > {pidfile}; exec sleep 600")
    assert added.returncode == 0, added.stderr
    watch = rig.spawn("watch", env={"FM_CHECK_TIMEOUT": "600"})
    eventually("the check to start", lambda: pidfile.exists() and pidfile.read_text().strip())
    check_pid = int(pidfile.read_text())
    assert os.getpgid(check_pid) == check_pid  # the check leads its own process group
    watch.popen.send_signal(signal.SIGTERM)
    assert watch.wait() == 143

    def group_gone() -> bool:
        try:
            os.killpg(check_pid, 0)
        except ProcessLookupError:
            return True
        return not alive(check_pid)  # only an unreaped zombie is left

    eventually("the check's process group to be gone", group_gone)
    state = episode(rig.home)
    assert isinstance(state, episodes.Episode) and (state.status, state.kind) == (
        "pending", "downtime")
    assert watcher_health(rig.home, rig.env).state == "none"
    assert _kv(rig.home, "watch.open") == ""


def _remove(path: Path) -> None:
    """Make *path* vanish at once (a plain rmtree races the watcher's own writes into it)."""
    aside = path.with_name(path.name + ".removed")
    os.rename(path, aside)
    shutil.rmtree(aside, ignore_errors=True)


@pytest.mark.parametrize("what", ["state", "home"])
def test_a_removed_ground_ends_the_watcher_with_a_logged_reason(rig: Rig, what: str) -> None:
    # A removed directory rings no doorbell: a short FM_POLL makes the watcher look soon.
    watch = rig.spawn("watch", env={"FM_POLL": "0.2"})
    eventually("the watcher to become healthy", rig.healthy_pid)
    gone = rig.home.state if what == "state" else rig.home.root
    _remove(gone)
    assert watch.wait() == 4
    assert f"watcher: {gone} no longer exists; ending this cycle" in watch.stderr()


def test_the_arm_reports_its_removed_ground(rig: Rig) -> None:
    arm = rig.spawn("arm", env={"FM_POLL": "0.2"})
    pid = started_pid(arm.line())
    _remove(rig.home.state)
    assert arm.line() == f"watcher: FAILED - arm ground removed: {rig.home.state} no longer exists"
    assert arm.wait() == 1
    eventually("the watcher to exit", lambda: not alive(pid))


def test_a_disposable_checkout_is_refused_before_any_state_is_touched(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, FM_DISPOSABLE_PATTERNS=f"/nowhere/*:{CORE}*")
    shutil.rmtree(rig.home.root)
    try:
        for command in ("watch", "arm"):
            done = rig.fm(command)
            assert done.returncode == 1
            assert done.stdout.startswith("watcher: FAILED - refusing to ")
            assert "disposable" in done.stdout and done.stdout.count("\n") == 1
            assert not rig.home.root.exists()
    finally:
        rig.reap()


def test_a_crew_session_never_arms_or_watches(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    try:
        for variable in ("FM_CREW", "FM_TASK_ID"):
            for command in ("watch", "arm"):
                done = subprocess.run([sys.executable, "-m", "firstmate", command],
                                      env={**rig.env, variable: "builder"}, capture_output=True,
                                      text=True, timeout=60, check=False)
                assert done.returncode == 1
                assert done.stdout == (f"watcher: FAILED - refusing to "
                                       f"{'arm' if command == 'arm' else 'run'} in a crew's "
                                       f"session ({variable}=builder): only the captain "
                                       f"{'arms the watcher' if command == 'arm' else 'watches'}; "
                                       "report with fm crew status\n")
        assert not (rig.home.logs / "cycle-exits.tsv").exists()
    finally:
        rig.reap()


def test_disposable_paths() -> None:
    marker = Path("/w/.no-mistakes/worktrees/abc/core/firstmate")
    assert disposable_checkout(marker, {}) == marker
    assert disposable_checkout(Path("/w/.no-mistakes/worktrees"), {}) is not None
    assert disposable_checkout(Path("/srv/fm/core/firstmate"), {}) is None
    assert disposable_checkout(Path("/srv/fm/core/firstmate"),
                               {"FM_DISPOSABLE_PATTERNS": "/tmp/*::/srv/*"}) is not None
    assert disposable_checkout(marker, {"FM_GATE_REFUSE_BYPASS": "1"}) is None


def test_small_helpers(tmp_path: Path) -> None:
    assert predecessor_arm_pid({"FM_WATCH_PREDECESSOR_ARM_PID": "123"}) == 123
    for junk in ("", "0", "1", "-5", "12a", "١٢"):
        assert predecessor_arm_pid({"FM_WATCH_PREDECESSOR_ARM_PID": junk}) is None
    home = Home(tmp_path / "h")
    assert missing_ground(home, tmp_path) == home.root
    home.ensure()
    assert missing_ground(home, tmp_path) is None
    assert missing_ground(home, tmp_path / "gone") == tmp_path / "gone"
    assert reason_line("check", "check: x") == "check: x"
    assert reason_line("signal", "hello\nworld") == "signal: hello world"
    assert reason_line("heartbeat", "heartbeat") == "heartbeat"
    assert reason_line("stale", "") == "stale:"


def test_health_reads_without_side_effects(tmp_path: Path) -> None:
    home = Home(tmp_path / "absent")
    health = watcher_health(home, {})
    assert (health.healthy, health.state, health.pid) == (False, "none", None)
    assert not home.root.exists()
