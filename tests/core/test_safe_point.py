"""The startup safe point: a stop that lands before a watcher claims its singleton is never lost.

The watcher's cleanup covers a stop only from its claim on (its owner record is the safe
point). Each test holds a watcher at a known point of its start - behind a live foreign holder
of the singleton, or with a stop raised right after its claim - instead of timing a signal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from firstmate.store import cyclelog, episodes
from firstmate.store.health import watcher_health
from firstmate.testing.procs import eventually
from watch_support import Rig, episode, hold_lock, rig

__all__ = ["rig"]

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")


def _handled_episode(rig: Rig) -> episodes.Episode:
    """A wake delivered, drained and acknowledged: the episode is acked, nothing watches."""
    assert rig.fm("wake", "append", "signal", "w1.status", "done: w1").returncode == 0
    drained = json.loads(rig.fm("wake", "drain", "--json").stdout)
    acked = rig.fm("wake", "drain", "--ack-through", str(drained["ack_through"]),
                   "--recovery-generation", drained["generation"])
    assert acked.returncode == 0, acked.stderr
    state = episode(rig.home)
    assert isinstance(state, episodes.Episode) and state.status == "acked", state
    return state


def _announced_down(rig: Rig, before: episodes.Episode) -> None:
    """The acknowledged episode *before* gave way to a new pending downtime episode."""
    after = episode(rig.home)
    assert isinstance(after, episodes.Episode)
    assert (after.status, after.kind) == ("pending", "downtime")
    assert after.generation != before.generation


def _has_open(pid: int, path: Path) -> bool:
    """Whether *pid* has *path* open (a watcher waiting in its claim keeps the lock file open)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                return True
        except OSError:
            continue
    return False


def _handled(pid: int, sig: int) -> bool:
    """Whether *pid* took *sig*: no longer pending, and held from then on (a stop handler holds
    the stop signals once it ran)."""
    masks = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("SigBlk", "SigPnd", "ShdPnd"):
                masks[name] = int(value.strip(), 16)
    bit = 1 << (sig - 1)
    return bool(masks["SigBlk"] & bit) and not (masks["SigPnd"] | masks["ShdPnd"]) & bit


def _claiming_child(rig: Rig, arm_pid: int) -> int:
    """The arm's watcher child, once it waits in its claim of the singleton."""
    lock = rig.home.lock_path("watch")

    def child() -> int | None:
        for proc in psutil.Process(arm_pid).children():
            if _has_open(proc.pid, lock):
                return proc.pid
        return None

    return int(str(eventually("the arm's watcher to wait in its claim", child)))


def test_a_stopped_arm_signals_its_watcher_only_once_it_holds_the_singleton(rig: Rig) -> None:
    before = _handled_episode(rig)
    holder = hold_lock(rig, "watch")  # holds the new watcher in its claim
    arm = rig.spawn("arm")
    child = _claiming_child(rig, arm.pid)
    arm.popen.send_signal(signal.SIGTERM)
    eventually("the arm to take its TERM", lambda: _handled(arm.pid, signal.SIGTERM))
    # The watcher has not claimed yet: a TERM now would be lost. Let it claim.
    holder.kill()
    holder.wait()
    assert arm.line() == "watcher: FAILED - arm interrupted by SIGTERM"
    assert arm.wait() == 143
    stderr = arm.stderr()
    assert "watcher: stopped by SIGTERM; publishing downtime and releasing the lock" in stderr
    assert "before it claimed" not in stderr  # it was signalled from the safe point on
    _announced_down(rig, before)
    row = cyclelog.rows(rig.home)[-1]
    assert (row.arm_pid, row.watcher_pid, row.reason, row.signal) == (
        arm.pid, child, "arm-interrupted", "TERM")
    assert watcher_health(rig.home, rig.env).state == "none"


def test_a_watcher_stopped_before_its_claim_still_announces_the_downtime(rig: Rig) -> None:
    before = _handled_episode(rig)
    hold_lock(rig, "watch")  # a live holder that is no watcher: nothing watches this home
    watch = rig.spawn("watch")
    eventually("the watcher to wait in its claim",
               lambda: _has_open(watch.pid, rig.home.lock_path("watch")))
    watch.popen.send_signal(signal.SIGTERM)
    assert watch.wait() == 143
    assert "watcher: stopped by SIGTERM before it claimed the singleton" in watch.stderr()
    _announced_down(rig, before)


def test_a_watcher_stopped_before_its_claim_leaves_a_healthy_watchers_episode_alone(
        rig: Rig) -> None:
    first = rig.spawn("arm")
    assert first.line().startswith("watcher: started pid=")
    state = episode(rig.home)
    # Held back by the healthy watcher's singleton until it sees that watcher is healthy, the
    # second one stands down; TERMed in its claim, it must not publish over a watched home.
    watch = rig.spawn("watch", env={"FM_GUARD_GRACE": "0.001"})
    eventually("the second watcher to wait in its claim",
               lambda: _has_open(watch.pid, rig.home.lock_path("watch")))
    watch.popen.send_signal(signal.SIGTERM)
    assert watch.wait() == 143
    assert "before it claimed the singleton" in watch.stderr()
    assert episode(rig.home) == state


STOPPED_AFTER_CLAIM = """
import os, signal, sys
from firstmate.watch import watcher
from firstmate.testing.procs import eventually

opened = watcher.Watcher._open_cycle

def stopped_first(self):
    # A stop right after the claim (the safe point), before the store is opened.
    os.kill(os.getpid(), signal.SIGTERM)
    return opened(self)

watcher.Watcher._open_cycle = stopped_first
raise SystemExit(watcher.run())
"""


def test_a_stop_right_after_the_claim_publishes_the_downtime(rig: Rig) -> None:
    before = _handled_episode(rig)
    done = subprocess.run([sys.executable, "-c", STOPPED_AFTER_CLAIM], capture_output=True,
                          text=True, env=rig.env, timeout=60, check=False)
    assert done.returncode == 143, done.stderr
    assert "stopped by SIGTERM; publishing downtime and releasing the lock" in done.stderr
    _announced_down(rig, before)
    assert watcher_health(rig.home, rig.env).state == "none"


def test_a_stopped_arm_whose_watcher_fails_its_start_relays_it_and_announces_downtime(
        rig: Rig) -> None:
    before = _handled_episode(rig)
    holder = hold_lock(rig, "watch")  # outlasts the new watcher's startup bound
    arm = rig.spawn("arm", env={"FM_WATCHER_STARTUP_LOCK_BOUND": "3"})
    child = _claiming_child(rig, arm.pid)
    arm.popen.send_signal(signal.SIGTERM)
    eventually("the arm to take its TERM", lambda: _handled(arm.pid, signal.SIGTERM))
    # The watcher ends its start on its own, unsignalled; the arm relays why, then its own end.
    assert arm.rest() == [f"watcher: FAILED - startup lock held by live pid {holder.pid}",
                          "watcher: FAILED - arm interrupted by SIGTERM"]
    assert arm.wait() == 143
    row = cyclelog.rows(rig.home)[-1]
    assert (row.watcher_pid, row.reason, row.exit_code, row.signal) == (
        child, "arm-interrupted", 1, "none")
    # Nothing watches (the holder is no watcher): the arm announced the downtime.
    _announced_down(rig, before)


def test_a_watcher_that_never_claims_is_killed_past_the_bound_and_the_downtime_announced(
        rig: Rig) -> None:
    before = _handled_episode(rig)
    hold_lock(rig, "watch")
    # The arm gives up confirming after 1 s and waits its safe-point bound (3 + 1 s) on top.
    arm = rig.spawn("arm", env={"FM_WATCHER_STARTUP_LOCK_BOUND": "3",
                                "FM_ARM_CONFIRM_TIMEOUT": "1"})
    child = _claiming_child(rig, arm.pid)
    os.kill(child, signal.SIGSTOP)  # stuck before its claim: it never claims, never ends
    assert arm.rest() == ["watcher: FAILED - no live watcher with a fresh beacon"]
    assert arm.wait() == 1
    row = cyclelog.rows(rig.home)[-1]
    # Never signalled with a TERM it could not act on: killed once the bound ran out.
    assert (row.watcher_pid, row.reason, row.signal) == (child, "confirmation-timeout", "KILL")
    _announced_down(rig, before)
