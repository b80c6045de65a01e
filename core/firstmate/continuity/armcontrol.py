"""The arm's control modes: ``--stop``, ``--restart``, ``--take-over`` and the handoff
confirmation ``--handling-delivered``, and the verified stopping of a watcher they share."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import TYPE_CHECKING

from firstmate.base.errors import FirstmateError
from firstmate.base.exitcodes import ExitCode
from firstmate.base.pidfd import open_pidfd
from firstmate.continuity.armlinks import started_link
from firstmate.continuity.watchchild import _readable
from firstmate.store import cyclelog
from firstmate.store.health import WatcherHealth
from firstmate.store.identity import ProcessIdentity
from firstmate.store.stopping import REPLACED, STOPPED
from firstmate.watch.watcher import cleanup_lock_bound

if TYPE_CHECKING:
    from firstmate.continuity.arm import Arm

#: Seconds a take-over waits for the stopped watcher's cycle row.
TAKEOVER_ROW_WAIT = 2.0
#: Seconds between looks while waiting for a holder or a row.
POLL = 0.05


def stop_watcher(arm: Arm, health: WatcherHealth, *, then: str) -> str:
    """TERM the verified watcher *health* names and wait for it: ``stopped``, ``gone`` (it
    was no longer that process), or ``alive`` (it outlived the wait). *then* is what follows
    the stop (:data:`~firstmate.store.stopping.REPLACED` or ``STOPPED``), recorded before the
    signal for the watcher's arm (:mod:`firstmate.store.stopping`)."""
    from firstmate.store import stopping
    from firstmate.store.identity import matches, signal_verified

    ident = ProcessIdentity.parse(health.identity)
    if ident is None or ident.pid != health.pid:
        return "gone"
    stopping.record(arm.db, ident.pid, ident.token(), then)
    pidfd = open_pidfd(ident.pid)
    try:
        if not signal_verified(ident, signal.SIGTERM):
            return "gone"
        # A stopped (SIGSTOP) watcher handles its TERM only once it runs again.
        signal_verified(ident, signal.SIGCONT)
        bound = cleanup_lock_bound(arm.env.get("FM_WATCHER_CLEANUP_LOCK_BOUND")) + 5.0
        deadline = time.monotonic() + bound
        while matches(ident):
            left = deadline - time.monotonic()
            if left <= 0:
                return "alive"
            _readable([pidfd], min(left, 0.1 if pidfd is None else left))
        return "stopped"
    finally:
        if pidfd is not None:
            os.close(pidfd)

def verified_holder(arm: Arm) -> WatcherHealth:
    """The current holder, waiting (bounded) for a starting holder to publish its record."""
    health = arm.health()
    deadline = time.monotonic() + arm.confirm_timeout
    while health.state == "unverified" and not health.verified and \
            time.monotonic() < deadline:
        time.sleep(POLL)
        health = arm.health()
    return health

def stop(arm: Arm) -> int:
    health = verified_holder(arm)
    if health.state == "none":
        arm.say("watcher: none running")
        return ExitCode.OK
    if not health.verified:
        return arm.fail(f"lock holder pid={health.pid} could not be verified; left alone")
    outcome = stop_watcher(arm, health, then=STOPPED)
    if outcome == "alive":
        return arm.fail(f"pid={health.pid} did not stop")
    arm.say(f"watcher: stopped pid={health.pid}" if outcome == "stopped"
             else "watcher: none running")
    return ExitCode.OK

def restart(arm: Arm) -> int:
    health = verified_holder(arm)
    if health.state != "none":
        if not health.verified:
            return arm.fail(f"lock holder pid={health.pid} could not be verified; left alone")
        if stop_watcher(arm, health, then=REPLACED) == "alive":
            return arm.fail(f"pid={health.pid} did not stop")
    return arm.start()

def take_over(arm: Arm, arm_pid: int | None) -> int:
    from firstmate.store import episodes
    from firstmate.store.database import last_seq
    from firstmate.store.identity import identity_of

    health = verified_holder(arm)
    if arm_pid is not None:
        link = started_link(arm.db, arm_pid)
        live_arm = identity_of(arm_pid)
        owns = (
            link is not None and health.verified and health.pid == link.watcher_pid
            and health.identity == link.watcher_identity
            and (live_arm is None or live_arm.token() == link.arm_identity)
        )
        if not owns:
            # That arm owns no live cycle here: just attach (or start when none runs).
            return arm.arm()
    if health.state == "none":
        return arm.start()
    if not health.verified:
        return arm.fail(f"lock holder pid={health.pid} could not be verified; left alone")
    with arm.db.reading() as conn:
        before, seq_before = episodes.read(conn), last_seq(conn)
    term_at = time.time()
    outcome = stop_watcher(arm, health, then=REPLACED)
    if outcome == "alive":
        return arm.fail(f"pid={health.pid} did not stop")
    if outcome == "stopped" and isinstance(before, episodes.Episode) and \
            before.status == "acked" and health.pid is not None:
        restore_acked(arm, before, seq_before, health.pid, arm_pid, term_at)
    return arm.start()

def restore_acked(arm: Arm, before: object, seq_before: int, watcher_pid: int,
                  arm_pid: int | None, term_at: float) -> None:
    """Re-retire the episode the take-over's stop reopened, when the taken-over watcher's
    cycle row shows it ended by that TERM and no wake was appended since."""
    from firstmate.store import episodes, queue
    from firstmate.store.database import last_seq

    assert isinstance(before, episodes.Episode)
    deadline = time.monotonic() + TAKEOVER_ROW_WAIT
    while not any(
        row.watcher_pid == watcher_pid and row.signal == "TERM"
        and (arm_pid is None or row.arm_pid == arm_pid) and row.ended_at >= term_at - 1.0
        for row in cyclelog.rows(arm.home, arm.env)
    ):
        if time.monotonic() >= deadline:
            return
        time.sleep(POLL)
    with contextlib.suppress(FirstmateError), queue.locked(arm.db, timeout=10.0) as conn:
        now = episodes.read(conn)
        if (isinstance(now, episodes.Episode) and now.status == "pending"
                and now.kind == "downtime" and now.generation != before.generation
                and last_seq(conn) == seq_before):
            episodes.acknowledge(conn, now.generation)

def handling_delivered(arm: Arm, generation: str, watcher_pid: int, *,
                       timeout: float = 10.0) -> int:
    from firstmate.store import episodes

    health = arm.health()
    if not (health.verified and health.pid == watcher_pid):
        return arm.fail(f"pid={watcher_pid} is not the live identity-matched watcher")
    with arm.db.transaction(timeout=timeout) as conn:
        outcome = episodes.begin_handling(conn, generation)
        state = episodes.read(conn)
    token = state.token() if isinstance(state, episodes.Episode) else "none"
    if outcome is episodes.Handling.MISMATCH:
        return arm.fail(f"recovery generation {generation} does not match the current "
                         f"episode {token}", ExitCode.CONFLICT)
    if outcome is episodes.Handling.UNUSABLE:
        return arm.fail(f"no open recovery episode to hand off (episode {token})")
    note = " (already acknowledged)" if outcome is episodes.Handling.ALREADY_ACKED else ""
    arm.say(f"watcher: handling delivered generation={generation} pid={watcher_pid}{note}")
    return ExitCode.OK


__all__ = ["handling_delivered", "restart", "stop", "stop_watcher", "take_over", "verified_holder"]
