"""The Claude auto-arm ledger: generation claims of the Stop hook, as the turn-end guard reads them.

The guard reaches it through ``firstmate_rearm_ledger`` (:class:`ClaudeLedger`); its knobs
(``FM_CLAUDE_TURNEND_BLOCK_BUDGET``, ``FM_CLAUDE_AUTOARM_SYNC_WAIT_MS``) are named in
:data:`GUARD`, this harness's ``GuardProfile``.

The Claude ``Stop``/``StopFailure`` hook (the auto-arm) takes a *generation claim* before it
arms, and records the claim's outcome when it is done. The turn-end guard cooperates with it: an
open claim that is still deciding, or a fresh rewake, lets the stop through, while a finished,
hung or identity-mismatched claim must never suppress recovery.

Everything lives in the store's ``kv`` table, so each change is one SQLite write transaction:

``claude.autoarm``           one JSON object: ``epoch`` (monotonic claim generation), ``owner_pid``,
                             ``owner_identity`` (mandatory identity token), ``outcome``,
                             ``updated_at``, ``session_pid``, ``recovery_generation``
``claude.autoarm.notified``  the epoch whose failure notice the auto-arm delivered (consumed)
``claude.autoarm.alarmed``   the epoch at which the guard spent its one attended fail-open

Outcomes: ``arming`` (claim open), ``rewake`` (a wake was delivered by exit 2), ``failed``,
``failed-suppressed``, ``clean``, ``away``, ``refused``.

A claim is *open and deciding* while its outcome is ``arming``, its owner pid is alive with the
recorded identity, and it is not *stuck*: stuck means the entry and the watcher beacon are both
older than the guard grace (an owner that hung mid-arm; a healthy long cycle keeps the beacon
fresh, and every arming phase without a watcher is bounded in seconds).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
from firstmate.base.envnum import env_float
from firstmate.plugin.harness import ClaimFacts, GuardProfile
from firstmate.store.database import kv_get, kv_set

if TYPE_CHECKING:
    from firstmate.store.health import WatcherHealth

LEDGER_KEY = "claude.autoarm"
NOTIFIED_KEY = "claude.autoarm.notified"
ALARMED_KEY = "claude.autoarm.alarmed"
OUTCOMES = ("arming", "rewake", "failed", "failed-suppressed", "clean", "away", "refused")
FAILED_OUTCOMES = ("failed", "failed-suppressed")
#: Seconds a rewake (or a failure) counts as fresh: ``FM_CLAUDE_AUTOARM_EPOCH_FRESH``.
DEFAULT_FRESH = 15.0
FRESH_ENV = "FM_CLAUDE_AUTOARM_EPOCH_FRESH"

#: How the turn-end guard treats Claude Code: it blocks, ignores the loop flags (the ledger
#: decides), and cooperates with this ledger under these knobs.
GUARD = GuardProfile(style="block", loop_flags=(), rearm_ledger=True,
                     block_budget=3, block_budget_env="FM_CLAUDE_TURNEND_BLOCK_BUDGET",
                     sync_wait_ms=800, sync_wait_env="FM_CLAUDE_AUTOARM_SYNC_WAIT_MS")


@attrs.frozen
class Ledger:
    epoch: int
    owner_pid: int
    owner_identity: str
    outcome: str
    updated_at: float
    session_pid: int | None = None
    recovery_generation: str | None = None

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> Ledger | None:
        if not text:
            return None
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(obj, dict):
            return None
        epoch, pid, ident = obj.get("epoch"), obj.get("owner_pid"), obj.get("owner_identity")
        outcome, at = obj.get("outcome"), obj.get("updated_at")
        session, gen = obj.get("session_pid"), obj.get("recovery_generation")
        if type(epoch) is not int or type(pid) is not int or not isinstance(ident, str):
            return None
        if outcome not in OUTCOMES or isinstance(at, bool) or not isinstance(at, int | float):
            return None
        return cls(epoch, pid, ident, str(outcome), float(at),
                   session if type(session) is int else None,
                   gen if isinstance(gen, str) else None)


def read(conn: sqlite3.Connection) -> Ledger | None:
    """The current entry, or None when there is none (or it is unreadable: no claim)."""
    return Ledger.from_json(kv_get(conn, LEDGER_KEY))


def _epoch_value(conn: sqlite3.Connection, key: str) -> int | None:
    raw = (kv_get(conn, key) or "").strip()
    return int(raw) if raw.isascii() and raw.isdigit() else None


def notified_epoch(conn: sqlite3.Connection) -> int | None:
    return _epoch_value(conn, NOTIFIED_KEY)


def alarmed_epoch(conn: sqlite3.Connection) -> int | None:
    return _epoch_value(conn, ALARMED_KEY)


# --- writers (the Stop hook and the guard; call inside a write transaction) ------------------------------


def claim_next(conn: sqlite3.Connection, owner_pid: int, owner_identity: str, *,
               session_pid: int | None = None, now: float | None = None) -> Ledger:
    """Take the next generation: a newer epoch supersedes whatever claim was there."""
    if not owner_identity:
        raise ValueError("an auto-arm claim needs its owner's identity token")
    current = read(conn)
    entry = Ledger((current.epoch if current else 0) + 1, int(owner_pid), owner_identity,
                   "arming", time.time() if now is None else now, session_pid)
    kv_set(conn, LEDGER_KEY, entry.to_json())
    return entry


def commit(conn: sqlite3.Connection, epoch: int, owner_pid: int, outcome: str, *,
           recovery_generation: str | None = None, now: float | None = None) -> bool:
    """Record *outcome* for the claim (*epoch*, *owner_pid*). False when a newer claim
    superseded it: a superseded owner goes silent."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown auto-arm outcome {outcome!r}")
    current = read(conn)
    if current is None or current.epoch != epoch or current.owner_pid != owner_pid:
        return False
    kv_set(conn, LEDGER_KEY, attrs.evolve(
        current, outcome=outcome, updated_at=time.time() if now is None else now,
        recovery_generation=recovery_generation or current.recovery_generation).to_json())
    return True


def mark_notified(conn: sqlite3.Connection, epoch: int) -> None:
    """The auto-arm delivered the failure notice of this episode (at *epoch*)."""
    kv_set(conn, NOTIFIED_KEY, str(int(epoch)))


def mark_alarmed(conn: sqlite3.Connection, epoch: int | None) -> None:
    kv_set(conn, ALARMED_KEY, str(int(epoch or 0)))


def clear_failure(conn: sqlite3.Connection) -> None:
    """Positive recovery: forget the failure notice and the attended alarm."""
    conn.execute("DELETE FROM kv WHERE key IN (?, ?)", (NOTIFIED_KEY, ALARMED_KEY))


# --- readers' predicates --------------------------------------------------------------------------


def owner_live(entry: Ledger) -> bool:
    from firstmate.store.identity import ProcessIdentity, matches

    ident = ProcessIdentity.parse(entry.owner_identity)
    return ident is not None and ident.pid == entry.owner_pid and matches(ident)


def stuck(entry: Ledger, *, now: float, beacon_age: float | None, grace: float) -> bool:
    """The entry and the beacon are both older than *grace*: the owner hung mid-arm."""
    return now - entry.updated_at > grace and (beacon_age is None or beacon_age > grace)


def fresh(entry: Ledger, *, now: float, window: float = DEFAULT_FRESH) -> bool:
    return 0 <= now - entry.updated_at <= window or entry.updated_at > now


@attrs.define(eq=False)
class ClaudeLedger:
    """This ledger as the turn-end guard asks for it (``firstmate.plugin.harness.RearmLedger``)."""

    def claim_facts(self, conn: Any, *, env: Mapping[str, str], health: WatcherHealth,
                    now: float) -> ClaimFacts:
        return claim_facts(conn, env=env, health=health, now=now)

    def clear_failure(self, conn: Any) -> None:
        clear_failure(conn)

    def mark_alarmed(self, conn: Any, epoch: int | None) -> None:
        mark_alarmed(conn, epoch)


def claim_facts(conn: sqlite3.Connection, *, env: Mapping[str, str], health: WatcherHealth,
                now: float) -> ClaimFacts:
    """The entry, the notice and the alarm as the guard's facts: *deciding* needs an ``arming``
    claim whose owner is live, identity-matched and not stuck (against *health*'s beacon)."""
    entry = read(conn)
    notified = notified_epoch(conn) is not None
    alarmed = alarmed_epoch(conn) is not None
    if entry is None:
        return ClaimFacts(notified=notified, alarmed=alarmed)
    window = env_float(env, FRESH_ENV, DEFAULT_FRESH)
    deciding = (entry.outcome == "arming" and owner_live(entry)
                and not stuck(entry, now=now, beacon_age=health.beacon_age, grace=health.grace))
    return ClaimFacts(entry.epoch, entry.outcome, deciding, fresh(entry, now=now, window=window),
                      entry.outcome in FAILED_OUTCOMES, notified, alarmed)


__all__ = [
    "ALARMED_KEY",
    "DEFAULT_FRESH",
    "FAILED_OUTCOMES",
    "FRESH_ENV",
    "GUARD",
    "LEDGER_KEY",
    "NOTIFIED_KEY",
    "OUTCOMES",
    "ClaudeLedger",
    "Ledger",
    "alarmed_epoch",
    "claim_facts",
    "claim_next",
    "clear_failure",
    "commit",
    "fresh",
    "mark_alarmed",
    "mark_notified",
    "notified_epoch",
    "owner_live",
    "read",
    "stuck",
]
