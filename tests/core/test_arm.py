"""The arm: start or attach, follow successors, resolve closes, stop and take over - for real."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import typing

import psutil
import pytest
from firstmate.base.errors import UsageError
from firstmate.continuity import armargs, armlinks
from firstmate.continuity.watchchild import Child
from firstmate.store import cyclelog, episodes
from firstmate.store.database import open_store
from firstmate.store.health import watcher_health
from firstmate.store.identity import identity_of
from firstmate.testing.procs import eventually
from watch_support import (
    Rig,
    alive,
    attached_pid,
    episode,
    hold_lock,
    rig,
    started_pid,
)

__all__ = ["rig"]

#: Failure paths wait this long for a successor before they give up.
# Shortens only the wait for a successor after a close without a delivery: a child's start
# keeps the default confirmation budget, which a loaded machine needs.
SHORT_SUCCESSOR = {"FM_ARM_SUCCESSOR_CONFIRM_TIMEOUT": "2"}


def _drain_and_ack(rig: Rig) -> None:
    drained = rig.fm("wake", "drain", "--json")
    assert drained.returncode == 0, drained.stderr
    result = json.loads(drained.stdout)
    acked = rig.fm("wake", "drain", "--ack-through", str(result["ack_through"]),
                   "--recovery-generation", result["generation"])
    assert acked.returncode == 0, acked.stderr


def test_two_arms_one_starts_the_other_attaches_and_both_print_the_reason(rig: Rig) -> None:
    first = rig.spawn("arm")
    pid = started_pid(first.line())
    second = rig.spawn("arm")
    line = second.line()
    assert attached_pid(line) == pid and line.endswith("s)")
    rig.append("stale", "w1", "stale: w1")
    assert first.line() == "stale: w1"
    assert second.line() == "stale: w1"
    assert (first.wait(), second.wait()) == (0, 0)
    rows = cyclelog.rows(rig.home)
    reasons = {(row.arm_pid, row.origin, row.reason) for row in rows}
    assert (first.pid, "started", "actionable-stale") in reasons
    assert (second.pid, "attached", "attached-delivered-wake") in reasons


def test_arms_racing_to_start_end_with_one_watcher(rig: Rig) -> None:
    arms = [rig.spawn("arm") for _ in range(3)]
    firsts = [arm.line() for arm in arms]
    pids = {started_pid(s) if s.startswith("watcher: started") else attached_pid(s)
            for s in firsts}
    assert len(pids) == 1, firsts
    assert sum(s.startswith("watcher: started") for s in firsts) == 1, firsts
    rig.append("check", "race", "check: race")
    for arm in arms:
        assert arm.line() == "check: race"
        assert arm.wait() == 0


def test_a_killed_watcher_fails_its_arms_and_the_next_arm_recovers_once(rig: Rig) -> None:
    owner = rig.spawn("arm", env=SHORT_SUCCESSOR)
    pid = started_pid(owner.line())
    follower = rig.spawn("arm", env=SHORT_SUCCESSOR)
    assert attached_pid(follower.line()) == pid
    os.kill(pid, signal.SIGKILL)
    for arm in (owner, follower):
        assert arm.line() == "watcher: FAILED - cycle ended without an actionable reason"
        assert arm.wait() == 1
    # Work queued while nothing watched resurfaces once, at the next start.
    rig.append("check", "late", "check: arrived while down")
    nxt = rig.spawn("arm")
    started_pid(nxt.line())
    assert nxt.line() == "check: rearm-resurface"
    assert nxt.wait() == 0
    state = episode(rig.home)
    assert isinstance(state, episodes.Episode) and state.status == "announced"
    # Announced once: the arm after it does not resurface the same episode again.
    again = rig.spawn("arm")
    started_pid(again.line())
    rig.append("check", "fresh", "check: fresh work")
    assert again.line() == "check: fresh work"
    assert again.wait() == 0


def test_a_killed_watcher_with_nothing_queued_is_retired_silently(rig: Rig) -> None:
    owner = rig.spawn("arm", env=SHORT_SUCCESSOR)
    pid = started_pid(owner.line())
    os.kill(pid, signal.SIGKILL)
    assert owner.line() == "watcher: FAILED - cycle ended without an actionable reason"
    owner.wait()
    nxt = rig.spawn("arm")
    started_pid(nxt.line())

    def retired() -> bool:
        state = episode(rig.home)
        return isinstance(state, episodes.Episode) and state.status == "acked"

    eventually("the downtime episode to be retired silently", retired)
    rig.append("check", "x", "check: after the silent retirement")
    assert nxt.line() == "check: after the silent retirement"
    assert nxt.wait() == 0


def test_a_stale_watcher_under_the_stall_bound_is_reported_and_left_alone(rig: Rig) -> None:
    grace = {"FM_GUARD_GRACE": "2", "FM_ARM_STALL_BOUND": "3600"}
    owner = rig.spawn("arm", env=grace)
    pid = started_pid(owner.line())
    os.kill(pid, signal.SIGSTOP)
    try:
        eventually("the beacon to go stale",
                   lambda: watcher_health(rig.home, {**rig.env, **grace}).state == "stale-beacon")
        other = rig.spawn("arm", env=grace)
        line = other.line()
        assert line.startswith(f"watcher: FAILED - live watcher pid={pid} has a stale beacon")
        assert "--take-over" in line
        assert other.wait() == 1
        # The arm that follows it waits (until the stall bound) instead of failing.
        assert owner.popen.poll() is None
        assert psutil.Process(pid).status() == psutil.STATUS_STOPPED
    finally:
        os.kill(pid, signal.SIGCONT)
    rig.append("check", "k", "check: after the pause")
    assert owner.line() == "check: after the pause"
    assert owner.wait() == 0


WEDGE = {"FM_GUARD_GRACE": "1", "FM_ARM_STALL_BOUND": "2", "FM_ARM_STALL_PING": "1"}


def _stop_between_polls(rig: Rig, pid: int) -> None:
    """SIGSTOP the watcher at a moment it holds no queue lock (stopped inside a poll it would
    block every producer too, which is another test)."""
    from firstmate.base.errors import LockTimeout
    from firstmate.store.locks import FileLock

    probe = FileLock(rig.home.lock_path("queue"), "test-probe", rig.home.root)
    deadline = time.monotonic() + 60
    while True:
        os.kill(pid, signal.SIGSTOP)
        try:
            probe.acquire(0)
        except LockTimeout:
            os.kill(pid, signal.SIGCONT)  # mid-poll: let it finish and try again
            assert time.monotonic() < deadline, "the watcher never left the queue lock"
            time.sleep(0.02)
            continue
        probe.release()
        return


def _wedged(rig: Rig, pid: int) -> bool:
    health = watcher_health(rig.home, {**rig.env, **WEDGE})
    return health.pid == pid and health.beacon_age is not None and health.beacon_age >= 2.5


def test_a_wedged_watcher_is_replaced_by_the_next_re_arm_and_nothing_is_delivered_twice(
    rig: Rig,
) -> None:
    # (The arm that started it waits longer, so the re-arm below is the one that recovers.)
    owner = rig.spawn("arm", env={**WEDGE, "FM_ARM_STALL_BOUND": "3600"})
    wedged = started_pid(owner.line())
    _stop_between_polls(rig, wedged)  # alive, holding the singleton, never polling again
    rig.append("check", "during", "check: appended during the wedge")
    eventually("the beacon to pass the stall bound", lambda: _wedged(rig, wedged))
    rearm = rig.spawn("arm", env=WEDGE)
    fresh = started_pid(rearm.line())
    assert fresh != wedged
    eventually("the wedged watcher to be stopped", lambda: not alive(wedged))
    reason = rearm.line()
    assert not reason.startswith("watcher: FAILED"), reason
    assert rearm.wait() == 0
    drained = rig.fm("wake", "drain", "--json")
    rows = json.loads(drained.stdout)["rows"]
    payloads = [r["payload"] for r in rows]
    assert "check: appended during the wedge" in payloads
    replaced = [p for p in payloads if p.startswith("check: watcher-replaced: ")]
    assert len(replaced) == 1 and f"watcher pid={wedged} was wedged" in replaced[0]
    _drain_and_ack(rig)
    # The arm that followed the wedged watcher went on to the replacement's cycle: attached to
    # it, or (it closed first) its reason found in the delivery ledger. Never a FAILED line.
    line = owner.line()
    if line.startswith("watcher: attached"):
        assert attached_pid(line) == fresh
        line = owner.line()
    assert line == reason
    assert owner.wait() == 0
    # Exactly once: the next wake is the next event's.
    nxt = rig.spawn("arm")
    started_pid(nxt.line())
    rig.append("check", "next", "check: next event")
    assert nxt.line() == "check: next event"
    row = next(r for r in cyclelog.rows(rig.home) if r.watcher_pid == wedged
               and r.arm_pid == rearm.pid)
    assert row.reason == "stalled-holder-replaced"


def test_a_watcher_that_answers_the_ring_within_the_ping_window_is_kept(rig: Rig) -> None:
    slow = {**WEDGE, "FM_ARM_STALL_PING": "60"}
    owner = rig.spawn("arm", env=slow)
    pid = started_pid(owner.line())
    os.kill(pid, signal.SIGSTOP)
    eventually("the beacon to pass the stall bound", lambda: _wedged(rig, pid))
    rearm = rig.spawn("arm", env=slow)
    # Like a laptop waking from sleep: it runs again, answers the ring, refreshes its beacon.
    os.kill(pid, signal.SIGCONT)
    assert attached_pid(rearm.line()) == pid
    assert alive(pid)
    rig.append("check", "k", "check: kept")
    assert rearm.line() == owner.line() == "check: kept"


def test_a_wedged_holder_that_is_not_verifiably_ours_is_never_signalled(rig: Rig) -> None:
    victim, holder = _unverifiable_holder(rig)
    rig.home.beacon.write_text("")
    os.utime(rig.home.beacon, (1.0, 1.0))  # ancient: far past any stall bound
    done = rig.fm("arm", env={**WEDGE, "FM_ARM_CONFIRM_TIMEOUT": "1"})
    assert done.returncode == 1 and done.stdout.startswith("watcher: FAILED - "), done.stdout
    assert victim.poll() is None and holder.poll() is None


#: A watcher that holds a crew's decision (coalescing it for ten minutes) instead of waking.
HOLDS_DECISIONS = {**SHORT_SUCCESSOR, "FM_SIGNAL_GRACE": "600", "FM_SIGNAL_URGENT_QUIET": "600"}


def _acked_with_an_unpresented_decision(rig: Rig) -> None:
    """An acknowledged episode, and a crew decision no drain presented (asked after the drain):
    a recovery would have something to show, so only a kept acknowledgement keeps it quiet."""
    assert rig.fm("crew", "add", "c1", "--pane", "%99").returncode == 0
    assert rig.fm("crew", "status", "c1", "needs-decision: key=k1 pick a branch").returncode == 0
    first = rig.spawn("arm")
    started_pid(first.line())
    assert first.line().startswith("signal: c1.status: needs-decision: key=k1")
    assert first.wait() == 0
    _drain_and_ack(rig)
    assert episode(rig.home).token().startswith("acked:")  # type: ignore[union-attr]
    assert rig.fm("crew", "status", "c1", "needs-decision: key=k2 pick a name").returncode == 0


def test_take_over_stops_the_named_arms_watcher_and_keeps_an_acked_episode_quiet(
    rig: Rig,
) -> None:
    _acked_with_an_unpresented_decision(rig)
    victim_arm = rig.spawn("arm", env=HOLDS_DECISIONS)
    victim = started_pid(victim_arm.line())
    taker = rig.spawn("arm", "--take-over", str(victim_arm.pid), env=HOLDS_DECISIONS)
    fresh = started_pid(taker.line())
    assert fresh != victim
    assert not alive(victim)
    # The taken-over arm follows the fresh cycle (it never exits empty-handed).
    assert attached_pid(victim_arm.line()) == fresh
    rig.append("check", "new", "check: after take-over")
    assert taker.line() == "check: after take-over"  # not check: rearm-resurface
    assert victim_arm.line() == "check: after take-over"
    assert (taker.wait(), victim_arm.wait()) == (0, 0)
    row = next(r for r in cyclelog.rows(rig.home)
               if r.arm_pid == victim_arm.pid and r.watcher_pid == victim)
    # The row names the successor the arm went on to follow.
    assert (row.signal, row.exit_code, row.successor) == ("TERM", 143, f"attached:{fresh}")


def test_without_its_restore_the_stop_would_have_resurfaced(rig: Rig) -> None:
    # The counterfactual of the test above: a plain restart publishes downtime like any stop,
    # and the decision no drain presented makes the fresh cycle resurface it.
    _acked_with_an_unpresented_decision(rig)
    owner = rig.spawn("arm", env=HOLDS_DECISIONS)
    started_pid(owner.line())
    restart = rig.spawn("arm", "--restart")
    started_pid(restart.line())
    assert restart.line() == "check: rearm-resurface"
    assert restart.wait() == 0


def test_take_over_with_a_pid_that_owns_no_cycle_only_attaches(rig: Rig) -> None:
    owner = rig.spawn("arm")
    pid = started_pid(owner.line())
    foreign = rig.spawn("arm", "--take-over", str(os.getpid()))
    assert attached_pid(foreign.line()) == pid
    assert rig.healthy_pid() == pid
    rig.append("check", "k", "check: shared")
    assert owner.line() == foreign.line() == "check: shared"


def test_take_over_without_a_pid_replaces_whatever_watcher_runs(rig: Rig) -> None:
    owner = rig.spawn("arm", env=SHORT_SUCCESSOR)
    first = started_pid(owner.line())
    taker = rig.spawn("arm", "--take-over")
    second = started_pid(taker.line())
    assert second != first and not alive(first)
    assert attached_pid(owner.line()) == second
    rig.append("check", "t", "check: taken")
    assert taker.line() == owner.line() == "check: taken"


def test_restart_never_signals_a_reused_pid(rig: Rig) -> None:
    owner = rig.spawn("arm", env=SHORT_SUCCESSOR)
    pid = started_pid(owner.line())
    os.kill(pid, signal.SIGKILL)
    owner.line()
    victim = rig.sleeper()
    real = identity_of(victim.pid)
    assert real is not None
    # The dead watcher's record now names a live, unrelated process (a recycled pid).
    fake = f"{victim.pid}:{real.started - 50:.2f}:{real.cmd_hash}"
    record = {"pid": victim.pid, "identity": fake, "home": str(rig.home.root),
              "role": "watcher", "acquired_at": 1.0}
    rig.home.lock_path("watch").write_text(json.dumps(record))
    restart = rig.spawn("arm", "--restart")
    fresh = started_pid(restart.line())
    assert fresh != victim.pid
    assert victim.poll() is None and alive(victim.pid)
    rig.append("check", "r", "check: after restart")
    assert restart.line() == "check: after restart"
    assert restart.wait() == 0
    assert victim.poll() is None


HOLD_AS = """
import json, sys
from pathlib import Path
from firstmate.store.locks import FileLock
lock = FileLock(Path(sys.argv[1]), "watcher", Path(sys.argv[2]))
lock.acquire(None)
fh = lock._fh
fh.seek(0); fh.truncate(); fh.write(sys.argv[3].encode()); fh.flush()
print("acquired", flush=True)
sys.stdin.read()
"""


def _unverifiable_holder(rig: Rig) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """The watcher lock held by a process whose record names a live, unrelated process with a
    forged identity (a recycled pid): (that process, the lock holder)."""
    victim = rig.sleeper()
    real = identity_of(victim.pid)
    assert real is not None
    fake = f"{victim.pid}:{real.started - 50:.2f}:{real.cmd_hash}"
    record = json.dumps({"pid": victim.pid, "identity": fake, "home": str(rig.home.root),
                         "role": "watcher", "acquired_at": 1.0})
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_AS, str(rig.home.lock_path("watch")), str(rig.home.root),
         record], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=rig.env)
    rig.extra.append(holder)
    assert holder.stdout is not None and holder.stdout.readline() == b"acquired\n"
    return victim, holder


def test_restart_and_stop_leave_an_unverifiable_live_holder_alone(rig: Rig) -> None:
    victim, holder = _unverifiable_holder(rig)
    for mode in ("--restart", "--stop"):
        done = rig.fm("arm", mode, env={"FM_ARM_CONFIRM_TIMEOUT": "1"})
        assert done.returncode == 1
        assert done.stdout == (f"watcher: FAILED - lock holder pid={victim.pid} could not be "
                               "verified; left alone\n")
    assert victim.poll() is None and holder.poll() is None


#: A successor wait no test outlives: an arm that ends within a test's deadline did not wait.
NO_WAIT_WOULD_END = {"FM_ARM_SUCCESSOR_CONFIRM_TIMEOUT": "3600"}


@pytest.mark.parametrize("how", ["TERM", "KILL", "fm arm --stop"])
def test_an_owned_watcher_stopped_without_a_successor_fails_its_arm_at_once(
        rig: Rig, how: str) -> None:
    """A watcher that no fm command stopped to replace (killed from outside, or by --stop)
    has no successor coming: its arm reports the end without the successor wait."""
    owner = rig.spawn("arm", env=NO_WAIT_WOULD_END)
    pid = started_pid(owner.line())
    if how == "fm arm --stop":
        assert rig.fm("arm", "--stop").returncode == 0
    else:
        os.kill(pid, getattr(signal, f"SIG{how}"))
    assert owner.rest() == ["watcher: FAILED - cycle ended without an actionable reason"]
    assert owner.wait() == 1
    row = cyclelog.rows(rig.home)[-1]
    assert (row.watcher_pid, row.reason) == (pid, "signal-exit")
    # Nothing was lost: the next arm starts a watcher and wakes for what comes.
    again = rig.spawn("arm")
    started_pid(again.line())
    rig.append("check", "after", "check: after the stop")
    assert again.rest() == ["check: after the stop"]
    assert again.wait() == 0


def test_an_owned_watcher_replaced_by_a_take_over_is_still_followed(rig: Rig) -> None:
    """fm records a replacement before it signals: the stopped watcher's arm waits for and
    follows the successor, whatever the signal looked like from outside."""
    owner = rig.spawn("arm", env=NO_WAIT_WOULD_END)
    first = started_pid(owner.line())
    taker = rig.spawn("arm", "--take-over")
    second = started_pid(taker.line())
    assert second != first
    assert attached_pid(owner.line()) == second
    rig.append("check", "t", "check: taken over")
    assert owner.line() == taker.line() == "check: taken over"
    assert owner.wait() == taker.wait() == 0


def test_stop_stops_the_verified_watcher_and_its_arms_fail_without_a_delivery(rig: Rig) -> None:
    owner = rig.spawn("arm", env=SHORT_SUCCESSOR)
    pid = started_pid(owner.line())
    follower = rig.spawn("arm", env=SHORT_SUCCESSOR)
    assert attached_pid(follower.line()) == pid
    # An unrelated delivery from another pid must never satisfy the followed watcher's close.
    rig.append("check", "noise", "check: noise")  # closes this cycle ...
    assert owner.line() == follower.line() == "check: noise"
    assert owner.wait() == follower.wait() == 0
    _drain_and_ack(rig)  # (else the next start resurfaces the undrained row at once)
    owner = rig.spawn("arm", env=SHORT_SUCCESSOR)  # ... a new one, which we stop
    pid = started_pid(owner.line())
    follower = rig.spawn("arm", env=SHORT_SUCCESSOR)
    assert attached_pid(follower.line()) == pid
    done = rig.fm("arm", "--stop")
    assert (done.returncode, done.stdout) == (0, f"watcher: stopped pid={pid}\n")
    for arm in (owner, follower):
        assert arm.line() == "watcher: FAILED - cycle ended without an actionable reason"
        assert arm.wait() == 1
    done = rig.fm("arm", "--stop")
    assert (done.returncode, done.stdout) == (0, "watcher: none running\n")
    state = episode(rig.home)
    assert isinstance(state, episodes.Episode) and state.status == "pending"


def test_stop_in_a_home_no_watcher_ever_used_says_none_running_and_creates_nothing(rig: Rig) -> None:
    fresh = rig.tmp / "never-created"
    done = rig.fm("arm", "--stop", env={"FM_HOME": str(fresh)})
    assert (done.returncode, done.stdout, done.stderr) == (
        0, f"watcher: none running (no home at {fresh})\n", "")
    assert not fresh.exists()
    fresh.mkdir(mode=0o700)  # a home directory without its state/
    done = rig.fm("arm", "--stop", env={"FM_HOME": str(fresh)})
    assert (done.returncode, done.stdout, done.stderr) == (
        0, f"watcher: none running (no state directory in {fresh})\n", "")
    assert list(fresh.iterdir()) == []


def test_an_attached_arm_follows_a_successor_chain_across_two_cycles(rig: Rig) -> None:
    owner = rig.spawn("arm")
    first = started_pid(owner.line())
    follower = rig.spawn("arm")
    assert attached_pid(follower.line()) == first
    restart = rig.spawn("arm", "--restart")
    second = started_pid(restart.line())
    assert attached_pid(follower.line()) == second
    assert attached_pid(owner.line()) == second
    rig.append("heartbeat", "heartbeat", "heartbeat")
    for arm in (restart, follower, owner):
        assert arm.line() == "heartbeat"
        assert arm.wait() == 0
    named = [r.successor for r in cyclelog.rows(rig.home)
             if r.arm_pid == follower.pid and r.watcher_pid == first]
    assert named == [f"attached:{second}"]
    links = armlinks.links(open_store(rig.home))
    chained = [link for link in links
               if link.arm_pid == follower.pid and link.watcher_pid == second]
    assert chained and chained[-1].origin == "attached"
    assert chained[-1].predecessor_pid == first


def test_an_attached_arm_resolves_from_the_ledger_after_the_wake_was_handled(rig: Rig) -> None:
    owner = rig.spawn("arm")
    pid = started_pid(owner.line())
    follower = rig.spawn("arm")
    assert attached_pid(follower.line()) == pid
    os.kill(follower.pid, signal.SIGSTOP)
    try:
        rig.append("signal", "c.status", "signal: c.status: done: shipped")
        assert owner.line() == "signal: c.status: done: shipped"
        assert owner.wait() == 0
        eventually("the watcher to exit", lambda: not alive(pid))
        _drain_and_ack(rig)
        db = open_store(rig.home)
        with db.reading() as conn:
            assert conn.execute("SELECT count(*) FROM wakes").fetchone()[0] == 0
        db.close()
    finally:
        os.kill(follower.pid, signal.SIGCONT)
    assert follower.line() == "signal: c.status: done: shipped"
    assert follower.wait() == 0


def test_handling_delivered_confirms_the_successor_handoff(rig: Rig) -> None:
    first = rig.spawn("arm")
    started_pid(first.line())
    rig.append("check", "a", "check: a")
    assert first.line() == "check: a"
    assert first.wait() == 0
    successor = rig.spawn("arm", env={"FM_WATCH_PREDECESSOR_ARM_PID": str(first.pid)})
    line = successor.line()
    pid = started_pid(line)
    generation = line.rsplit("recovery-generation=", 1)[1]
    wrong = rig.fm("arm", "--handling-delivered", "other.1.x", "--watcher-pid", str(pid))
    assert wrong.returncode == 3 and wrong.stdout.startswith("watcher: FAILED - recovery generation")
    not_it = rig.fm("arm", "--handling-delivered", generation, "--watcher-pid", str(os.getpid()))
    assert not_it.returncode == 1
    assert not_it.stdout == (f"watcher: FAILED - pid={os.getpid()} is not the live "
                             "identity-matched watcher\n")
    ok = rig.fm("arm", "--handling-delivered", generation, "--watcher-pid", str(pid))
    assert (ok.returncode, ok.stdout) == (
        0, f"watcher: handling delivered generation={generation} pid={pid}\n")
    assert episode(rig.home).token() == f"pending:handling:{generation}"
    _drain_and_ack(rig)
    again = rig.fm("arm", "--handling-delivered", generation, "--watcher-pid", str(pid))
    assert (again.returncode, again.stdout) == (
        0, f"watcher: handling delivered generation={generation} pid={pid} (already acknowledged)\n")


@pytest.mark.parametrize("argv", [
    ["--bogus"], ["--restart", "--stop"], ["--take-over", "x"], ["--take-over", "1", "2"],
    ["--handling-delivered", "g"], ["--handling-delivered", "g", "--pid", "3"],
    ["--handling-delivered", "bad gen", "--watcher-pid", "3"],
    ["--handling-delivered", "g", "--watcher-pid", "0"], ["extra"],
])
def test_bad_usage_is_one_line_and_exit_2(rig: Rig, argv: list[str]) -> None:
    done = rig.fm("arm", *argv)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    with pytest.raises(UsageError):
        armargs.parse_args(argv)


def test_parse_args_modes() -> None:
    assert armargs.parse_args([]).name == "arm"
    assert armargs.parse_args(["--restart"]).name == "restart"
    assert armargs.parse_args(["--stop"]).name == "stop"
    assert armargs.parse_args(["--take-over"]) == armargs.Mode("take-over")
    assert armargs.parse_args(["--take-over", "42"]).arm_pid == 42
    mode = armargs.parse_args(["--handling-delivered", "a.1-b", "--watcher-pid", "7"])
    assert (mode.generation, mode.watcher_pid) == ("a.1-b", 7)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signalled_arm_stops_and_reaps_its_watcher(rig: Rig, sig: signal.Signals) -> None:
    arm = rig.spawn("arm")
    pid = started_pid(arm.line())
    arm.popen.send_signal(sig)
    assert arm.line() == f"watcher: FAILED - arm interrupted by {sig.name}"
    assert arm.wait() == 128 + sig
    assert not alive(pid)
    state = episode(rig.home)
    assert isinstance(state, episodes.Episode) and (state.status, state.kind) == (
        "pending", "downtime")
    row = cyclelog.rows(rig.home)[-1]
    assert (row.reason, row.watcher_pid, row.signal) == ("arm-interrupted", pid, "TERM")


def test_a_stop_pending_before_the_arm_set_up_still_gets_its_one_line(rig: Rig) -> None:
    # The arm inherits TERM blocked (as from a parent that held it while spawning) and TERM is
    # sent at once: it is handled when the arm unblocks it, before any cycle exists.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        arm = rig.spawn("arm")
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    arm.popen.send_signal(signal.SIGTERM)
    assert arm.line() == "watcher: FAILED - arm interrupted by SIGTERM"
    assert arm.wait() == 143
    assert watcher_health(rig.home, rig.env).pid is None


EARLY_STOP = """
import os, signal, sys
sys.argv = ["fm", "arm"]
from firstmate.cli import main as cli
from firstmate.testing.procs import eventually
dispatch = cli.dispatch

def stopped_first(args):
    # A stop after the interpreter runs, before the arm has imported its modules.
    os.kill(os.getpid(), signal.SIGTERM)
    return dispatch(args)

cli.dispatch = stopped_first
raise SystemExit(cli.main())
"""


def test_a_stop_before_the_arm_imported_anything_still_gets_its_one_line(rig: Rig) -> None:
    done = subprocess.run([sys.executable, "-c", EARLY_STOP], capture_output=True, text=True,
                          env=rig.env, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (143, "watcher: FAILED - arm interrupted by SIGTERM\n")
    assert watcher_health(rig.home, rig.env).pid is None


def test_cycle_rows_round_trip() -> None:
    row = cyclelog.CycleRow(1, "1:2.00:ab", None, "attached", 1.5, 2.5, None, "unknown",
                            "attached-cycle-ended", cyclelog.NO_BEACON)
    assert cyclelog.CycleRow.parse("\t".join(row.fields())) == row
    assert cyclelog.CycleRow.parse("arm_pid=x") is None


def _full_pipe() -> tuple[int, int]:
    """A pipe with no room left: the next write to its write end blocks until it is read."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    for size in (65536, 1):
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(w, b"x" * size)
    os.set_blocking(w, True)  # (shared with the process it is handed to)
    return r, w


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def test_a_stop_while_the_failed_line_is_printed_writes_no_second_row(rig: Rig) -> None:
    # A foreign holder of the singleton fails the start; the arm writes the cycle's row, then
    # prints the FAILED line into a full pipe, where it is held: TERM lands in between.
    holder = hold_lock(rig, "watch")
    r, w = _full_pipe()
    with open(rig.tmp / "arm.err", "wb") as err:
        arm = subprocess.Popen([sys.executable, "-m", "firstmate", "arm"], stdin=subprocess.DEVNULL,
                               stdout=w, stderr=err,
                               env={**rig.env, "FM_WATCHER_STARTUP_LOCK_BOUND": "0.5"})
    os.close(w)

    def mine() -> list[cyclelog.CycleRow]:
        return [row for row in cyclelog.rows(rig.home) if row.arm_pid == arm.pid]

    try:
        eventually("the failed cycle's row", mine)
        arm.send_signal(signal.SIGTERM)
        printed = _read_all(r).lstrip(b"x").decode()
        assert arm.wait(timeout=30) == 143
    finally:
        if arm.poll() is None:
            arm.kill()
            arm.wait()
    assert f"startup lock held by live pid {holder.pid}" in printed \
        or "arm interrupted by SIGTERM" in printed, printed
    rows = mine()
    assert [(row.origin, row.reason) for row in rows] == [("started", "nonzero-exit")], rows


def _pipe_child() -> tuple[Child, int]:
    """A Child whose stdout is a non-blocking pipe this test writes to (no process behind it)."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    proc = typing.cast("subprocess.Popen[bytes]", None)
    return Child(proc, None, 0.0, out_fd=read_end), write_end


def test_the_arm_takes_a_whole_line_in_one_read_and_finds_the_pipe_end_on_the_next() -> None:
    child, write_end = _pipe_child()
    try:
        os.write(write_end, b"check: one\n")
        os.close(write_end)
        child.read()
        # The line is relayed from the one read that emptied the pipe on a line's end; the
        # pipe's end (already there) is found by the next read, as the arm's loop makes it.
        assert child.lines == ["check: one"]
        assert child.out_fd is not None
        child.read()
        assert child.lines == ["check: one"] and child.out_fd is None
    finally:
        child.close()


def test_the_arm_reads_a_line_without_its_end_to_the_pipe_end_in_one_call() -> None:
    child, write_end = _pipe_child()
    try:
        os.write(write_end, b"check: two\nwatcher: FAILED - cut")
        child.read()
        assert child.lines == ["check: two"] and child.buffer == b"watcher: FAILED - cut"
        os.close(write_end)
        child.read()
        assert child.lines == ["check: two", "watcher: FAILED - cut"] and child.out_fd is None
    finally:
        child.close()
