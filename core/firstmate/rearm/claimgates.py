"""The gates of a claim-ledger park (:mod:`firstmate.rearm.claimpark`), in order.

A background stop hook runs after every turn end of every session that loaded it, so before it
claims anything it asks: is this session a genuine primary of the home, does it own the session
lock (a dead owner's record is reclaimed, but only after the next two gates; with no record at
all there is nothing stale to recover and the hook stays inert: the harness's session-start hook
takes the lock), is away mode off, and is there something to supervise. The harness's loop
flags are never consulted: a harness may keep them set after every wake.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from firstmate.store.home import Home

#: What the session lock looks like to the hook.
LOCK_STATES = ("owned", "absent", "reclaimable", "other-live", "unreadable")


@attrs.frozen
class GateFacts:
    primary: bool
    lock: str
    away: bool
    needed: bool


def decide_gates(f: GateFacts) -> str:
    """``proceed``, ``reclaim`` (take the lock, then proceed) or the code a stand-down has.

    Order matters: a dead owner's lock is only reclaimed once away mode and need allow it, and a
    session that does not own the lock never learns anything else about the home. An absent
    lock names no owner, so there is nothing stale to recover: taking it is the session-start
    hook's job, never a turn end's.
    """
    if not f.primary:
        return "out-of-scope"
    if f.lock == "absent":
        return "no-lock"
    if f.lock in ("other-live", "unreadable"):
        return "not-owner"
    if f.away:
        return "away"
    if not f.needed:
        return "no-need"
    return "proceed" if f.lock == "owned" else "reclaim"


def lock_state(home: Home, env: Mapping[str, str]) -> tuple[str, int | None]:
    """This session's view of the session lock, and the recorded pid."""
    from firstmate.continuity import session_lock

    found = session_lock.read_record(home)
    if found.kind == "absent":
        return "absent", None
    record = found.record
    if record is None:
        return "unreadable", found.pid
    try:
        if session_lock.owned_by_self(record, env=env):
            return "owned", record.pid
        return ("other-live" if session_lock.blocks_reclaim(record) else "reclaimable"), record.pid
    except Exception:  # an unreadable ancestry never arms on someone else's lock
        return "unreadable", record.pid


def away(home: Home) -> bool:
    from firstmate.host.away import is_away

    return is_away(home)


def needed(home: Home) -> bool:
    from firstmate.store.need import gather_need

    return gather_need(home).needed


def gather_gates(home: Home, payload: Mapping[str, Any] | None, env: Mapping[str, str],
                 project_env: tuple[str, ...] = ()) -> tuple[GateFacts, int | None]:
    """Read the gates' facts, cheapest first; the later ones keep harmless defaults once an
    earlier gate decides. *project_env* names the harness's project-directory variables."""
    from firstmate.store.scope import primary_scope

    if not primary_scope(home, payload, env, project_env=project_env).primary:
        return GateFacts(False, "absent", False, False), None
    lock, pid = lock_state(home, env)
    if lock in ("absent", "other-live", "unreadable"):
        return GateFacts(True, lock, False, False), pid
    return GateFacts(True, lock, away(home), needed(home)), pid


__all__ = ["LOCK_STATES", "GateFacts", "away", "decide_gates", "gather_gates", "lock_state",
           "needed"]
