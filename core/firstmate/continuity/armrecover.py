"""A wedged watcher: a verified watcher of ours whose beacon is older than the stall bound is
rung, given the ping window to answer, and otherwise replaced (``check: watcher-replaced``)."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import time
from typing import TYPE_CHECKING

from firstmate.base.errors import FirstmateError, LockTimeout
from firstmate.continuity.armcontrol import stop_watcher
from firstmate.store.cyclelog import lock_text
from firstmate.store.health import WatcherHealth
from firstmate.store.stopping import REPLACED
from firstmate.watch.watcher import cleanup_lock_bound

if TYPE_CHECKING:
    from firstmate.continuity.arm import Arm

#: The recovery lock (``state/recover.lock``): one recoverer at a time.
RECOVER_LOCK = "recover"
#: The key of the row that records a replacement.
REPLACED_KEY = "watcher-replaced"
#: Seconds between looks while a watcher answers its ring.
POLL = 0.05


def recover_wedged(arm: Arm, health: WatcherHealth, *, origin: str = "attached",
                   started_at: float | None = None) -> int:
    """Replace a verified watcher of ours whose beacon is older than the stall bound.

    It is rung first and given :attr:`ping_window` to prove it is alive (one that was only
    suspended, a laptop that slept, refreshes its beacon at once and is followed, not
    replaced). Otherwise it is stopped through the same verified signalling a take-over
    uses, a ``check: watcher-replaced`` row records the replacement (the next wake shows it
    once, with whatever queued meanwhile), and a fresh cycle starts.
    """
    from firstmate.store.locks import FileLock

    assert health.pid is not None
    # One recoverer at a time (every arm following the watcher meets the wedge at once): the
    # others wait for its outcome and then attach to whatever watches.
    lock = FileLock(arm.home.lock_path(RECOVER_LOCK), "recover", arm.home.root)
    bound = (arm.ping_window + cleanup_lock_bound(arm.env.get("FM_WATCHER_CLEANUP_LOCK_BOUND"))
             + 5.0 + arm.confirm_timeout)
    try:
        lock.acquire(bound)
    except LockTimeout:
        return arm.fail(f"wedged watcher pid={health.pid} is being replaced by another arm "
                         "that did not finish; run fm status")
    try:
        now = arm.health()
        if not (now.pid == health.pid and arm.wedged(now)):
            outcome: WatcherHealth | str = "again"  # recovered (or gone) meanwhile
        else:
            outcome = replace_wedged(arm, now, origin=origin, started_at=started_at)
    finally:
        lock.release()
    child = arm.child
    if (outcome == "again" or isinstance(outcome, WatcherHealth)) and child is not None \
            and not child.exited() and arm.health().pid == child.pid:
        return arm.follow_owned()  # our own child answered: go on following it
    if isinstance(outcome, WatcherHealth):
        return arm.follow(outcome)  # it answered the ring: only slow, not wedged
    if outcome == "again":
        return arm.arm()
    if outcome == "start":
        return arm.start()
    return arm.fail(outcome)

def replace_wedged(arm: Arm, health: WatcherHealth, *, origin: str,
                   started_at: float | None) -> WatcherHealth | str:
    """Under the recovery lock: ring, wait the ping window, then stop the wedged watcher and
    record the replacement. The answer: the watcher's health when it answered the ring,
    ``again`` when it went away meanwhile, ``start`` when a fresh cycle may start, or the
    message of a failure."""
    from firstmate.fast import bell
    from firstmate.store import queue

    assert health.pid is not None
    pid, age = health.pid, health.beacon_age
    with contextlib.suppress(OSError, FirstmateError):
        bell.ring(arm.home)
    deadline = time.monotonic() + arm.ping_window
    while time.monotonic() < deadline:
        time.sleep(POLL)
        now = arm.health()
        if now.healthy and now.pid == pid:
            return now
        if now.pid != pid:
            return "again"
    arm.row(watcher_pid=pid, origin=origin,
             started_at=time.time() if started_at is None else started_at,
             reason="stalled-holder-replaced", lock_before=lock_text(pid, health.identity))
    if stop_watcher(arm, health, then=REPLACED) == "alive":
        return (f"wedged watcher pid={pid} (beacon {health.age_text()}s) did not stop when "
                "signalled; left running - inspect it (it may be stuck in the kernel)")
    previous = arm.child
    if previous is not None and previous.pid == pid:  # our own child: reap it
        with contextlib.suppress(subprocess.TimeoutExpired):
            previous.proc.wait(timeout=arm.confirm_timeout)
        previous.close()
        arm.child = None
    shown = "unknown" if age is None else f"{age:.0f}s"
    with contextlib.suppress(FirstmateError, sqlite3.Error):
        queue.append(arm.db, "check", REPLACED_KEY,
                     f"check: watcher-replaced: watcher pid={pid} was wedged (beacon "
                     f"{shown} old, stall bound {arm.stall_bound:g}s) and was replaced; "
                     "wakes queued meanwhile are delivered with this one")
    return "start"


__all__ = ["RECOVER_LOCK", "REPLACED_KEY", "recover_wedged", "replace_wedged"]
