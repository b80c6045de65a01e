"""Stopping the watcher an arm started, at the startup safe point.

A watcher's cleanup (publish downtime, release the singleton) covers a stop only once it holds
the singleton: its owner record, pid and identity, is the startup safe point. Before it, a stop
is lost - the child has no lock to release and no store to publish its downtime in - so the
arm signals its child (when it is interrupted, and at its confirmation deadline) only once the
child's published identity matches; until then it waits for the claim or for the child to end
on its own (``watcher: already running``, a FAILED start), at most the child's own claim bound
plus the confirmation budget, and a child that never claimed by then is killed (it holds nothing
a kill could strand). Only a removed state directory, which leaves no lock to strand, skips the
wait. A start that ended without establishing supervision is then announced as down
(:func:`firstmate.store.downtime.publish_unwatched`).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from typing import TYPE_CHECKING

from firstmate.base.envnum import env_float
from firstmate.continuity.watchchild import _readable
from firstmate.watch.watcher import DEFAULT_STARTUP_BOUND, cleanup_lock_bound

if TYPE_CHECKING:
    from firstmate.continuity.arm import Arm

#: Seconds between looks at the singleton while a stopping arm waits for its child's claim.
SAFE_POINT_POLL = 0.05


def safe_point_bound(arm: Arm) -> float:
    """How long a stopping arm waits for its child to claim or end: the child's own bound on
    its claim, plus the confirmation budget its start gets."""
    return env_float(arm.env, "FM_WATCHER_STARTUP_LOCK_BOUND",
                     DEFAULT_STARTUP_BOUND) + arm.confirm_timeout


def reached_safe_point(arm: Arm) -> bool:
    """Wait until the arm's child holds the singleton under its own published identity (True),
    or has ended on its own (False); past :func:`safe_point_bound`, kill a child that never
    claimed (False)."""
    child = arm.child
    assert child is not None
    deadline = time.monotonic() + safe_point_bound(arm)
    while not child.exited():
        health = arm.health()
        if health.verified and health.pid == child.pid:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            with contextlib.suppress(OSError):
                child.proc.kill()
            child.proc.wait()
            return False
        events = _readable([child.out_fd, child.pidfd, child.ready], min(SAFE_POINT_POLL, left))
        if child.out_fd is not None and child.out_fd in events:
            child.read()  # kept for the relay (and a full pipe must not hold the child up)
        if child.ready is not None and child.ready in events:
            child.take_ready()
    return False


def stop_child(arm: Arm) -> None:
    """TERM the arm's child once it reached the safe point, wait (bounded), KILL if it must,
    and reap it. A child that ends first, or never claims, is not signalled."""
    child = arm.child
    if child is None or child.proc.returncode is not None:
        return
    if arm.home.state.is_dir() and not reached_safe_point(arm):
        return
    bound = cleanup_lock_bound(arm.env.get("FM_WATCHER_CLEANUP_LOCK_BOUND")) + 3.0
    with contextlib.suppress(OSError):
        child.proc.send_signal(signal.SIGTERM)
        child.proc.send_signal(signal.SIGCONT)
    try:
        child.proc.wait(timeout=bound)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            child.proc.kill()
        child.proc.wait()


def announce_down(arm: Arm) -> None:
    """After a start that ended without establishing supervision: publish the downtime, unless
    a watcher of this home holds the singleton."""
    from firstmate.store.downtime import publish_unwatched

    if arm.home.state.is_dir():
        publish_unwatched(arm.db, arm.env, bound=cleanup_lock_bound(
            arm.env.get("FM_WATCHER_CLEANUP_LOCK_BOUND")))


def confirmation_timeout(arm: Arm) -> int:
    child = arm.child
    assert child is not None
    stop_child(arm)
    arm.relay_failures()
    arm.row(watcher_pid=child.pid, origin="started", started_at=child.started_at,
            reason="confirmation-timeout", returncode=child.proc.returncode)
    announce_down(arm)
    return arm.fail("no live watcher with a fresh beacon")


def interrupted(arm: Arm, signum: int) -> int:
    """A stop reached the arm (stops stay held from here on): stop its child at the safe point,
    record the cycle, and say so unless the cycle's reason is already out (after the FAILED
    line of a child that ended its start on its own meanwhile)."""
    child = arm.child
    if child is not None:
        stop_child(arm)
        child.read()
        arm.handle_lines()
        arm.write_unsent()
        child.close()
        arm.row(watcher_pid=child.pid, origin="started", started_at=child.started_at,
                reason="arm-interrupted", returncode=child.proc.returncode)
        if arm.reason is None:
            announce_down(arm)
    if arm.reason is None:
        arm.relay_failures()
        arm.fail(f"arm interrupted by {signal.Signals(signum).name}")
    return 128 + signum


__all__ = ["SAFE_POINT_POLL", "announce_down", "confirmation_timeout", "interrupted",
           "reached_safe_point", "safe_point_bound", "stop_child"]
