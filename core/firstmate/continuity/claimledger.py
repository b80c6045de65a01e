"""The claim ledger: generation claims of a background stop hook, as the hook and the turn-end
guard share them (the :class:`~firstmate.rearm.claimpark.ClaimLedgerPark` strategy).

A harness whose stop hook runs in the background after the turn and wakes the idle session when
it exits (Claude Code's ``asyncRewake``) gets every turn end's hook at once, not deduplicated.
Before it arms, such a hook takes a *generation claim*; when it is done it records the claim's
outcome. The turn-end guard cooperates: an open claim that is still deciding, or a fresh wake,
lets the stop through, while a finished, hung or identity-mismatched claim must never suppress
recovery.

Everything lives in the store's ``kv`` table, keyed by the harness, so each change is one SQLite
write transaction:

``<harness>.autoarm``           one JSON object: ``epoch`` (monotonic claim generation),
                                ``owner_pid``, ``owner_identity`` (mandatory identity token),
                                ``outcome``, ``updated_at``, ``session_pid``,
                                ``recovery_generation``
``<harness>.autoarm.notified``  the epoch whose failure notice the hook delivered (consumed)
``<harness>.autoarm.alarmed``   the epoch at which the guard spent its one attended fail-open

Outcomes: ``arming`` (claim open), ``wake`` (a wake was delivered), ``failed``,
``failed-suppressed``, ``clean``, ``away``, ``refused``.

A claim is *open* while its outcome is ``arming``, its owner pid is alive with the recorded
identity, and it is not *stuck*: stuck means the entry and the watcher beacon are both older than
the guard grace (an owner that hung mid-arm; a healthy long cycle keeps the beacon fresh, and
every arming phase without a watcher is bounded in seconds).
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from typing import TYPE_CHECKING

import attrs

from firstmate.store.database import kv_get, kv_set

if TYPE_CHECKING:
    from firstmate.store.health import WatcherHealth

OUTCOMES = ("arming", "wake", "failed", "failed-suppressed", "clean", "away", "refused")
FAILED_OUTCOMES = ("failed", "failed-suppressed")
#: Outcomes older versions recorded under another name.
_RENAMED = {"rewake": "wake"}
#: Seconds a wake (or a failure) counts as fresh by default.
DEFAULT_FRESH = 15.0


def key(harness: str, suffix: str = "") -> str:
    """The ``kv`` key of *harness*'s ledger (or of one of its companions: ``notified``,
    ``alarmed``, or a key of the hook's own)."""
    base = re.sub(r"[^a-z0-9_-]", "", harness) + ".autoarm"
    return f"{base}.{suffix}" if suffix else base


@attrs.frozen
class ClaimFacts:
    """A harness's claim ledger as the turn-end guard sees it."""

    epoch: int | None = None
    outcome: str | None = None
    #: An ``arming`` claim whose owner is live, identity-matched and not stuck.
    deciding: bool = False
    #: The entry was written within the ledger's freshness window.
    fresh: bool = False
    #: A failed (or failed-suppressed) outcome.
    failed: bool = False
    #: The hook's failure notice of this episode was delivered (consumed).
    notified: bool = False
    #: The one attended fail-open of this failure episode was spent.
    alarmed: bool = False

    @property
    def fresh_wake(self) -> bool:
        return self.outcome == "wake" and self.fresh


@attrs.frozen
class Claim:
    """One generation claim."""

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
    def from_json(cls, text: str | None) -> Claim | None:
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
        outcome = _RENAMED.get(outcome, outcome) if isinstance(outcome, str) else outcome
        session, gen = obj.get("session_pid"), obj.get("recovery_generation")
        if type(epoch) is not int or type(pid) is not int or not isinstance(ident, str):
            return None
        if outcome not in OUTCOMES or isinstance(at, bool) or not isinstance(at, int | float):
            return None
        return cls(epoch, pid, ident, str(outcome), float(at),
                   session if type(session) is int else None,
                   gen if isinstance(gen, str) else None)


def read(conn: sqlite3.Connection, harness: str) -> Claim | None:
    """The current claim, or None when there is none (or it is unreadable: no claim)."""
    return Claim.from_json(kv_get(conn, key(harness)))


def _epoch_value(conn: sqlite3.Connection, name: str) -> int | None:
    raw = (kv_get(conn, name) or "").strip()
    return int(raw) if raw.isascii() and raw.isdigit() else None


def notified_epoch(conn: sqlite3.Connection, harness: str) -> int | None:
    return _epoch_value(conn, key(harness, "notified"))


def alarmed_epoch(conn: sqlite3.Connection, harness: str) -> int | None:
    return _epoch_value(conn, key(harness, "alarmed"))


# --- writers (the hook and the guard; call inside a write transaction) ------------------------


def claim_next(conn: sqlite3.Connection, harness: str, owner_pid: int, owner_identity: str, *,
               session_pid: int | None = None, now: float | None = None) -> Claim:
    """Take the next generation: a newer epoch supersedes whatever claim was there."""
    if not owner_identity:
        raise ValueError("a claim needs its owner's identity token")
    current = read(conn, harness)
    entry = Claim((current.epoch if current else 0) + 1, int(owner_pid), owner_identity,
                  "arming", time.time() if now is None else now, session_pid)
    kv_set(conn, key(harness), entry.to_json())
    return entry


def commit(conn: sqlite3.Connection, harness: str, epoch: int, owner_pid: int, outcome: str, *,
           recovery_generation: str | None = None, now: float | None = None) -> bool:
    """Record *outcome* for the claim (*epoch*, *owner_pid*). False when a newer claim
    superseded it: a superseded owner goes silent."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown claim outcome {outcome!r}")
    current = read(conn, harness)
    if current is None or current.epoch != epoch or current.owner_pid != owner_pid:
        return False
    kv_set(conn, key(harness), attrs.evolve(
        current, outcome=outcome, updated_at=time.time() if now is None else now,
        recovery_generation=recovery_generation or current.recovery_generation).to_json())
    return True


def mark_notified(conn: sqlite3.Connection, harness: str, epoch: int) -> None:
    """The hook delivered the failure notice of this episode (at *epoch*)."""
    kv_set(conn, key(harness, "notified"), str(int(epoch)))


def mark_alarmed(conn: sqlite3.Connection, harness: str, epoch: int | None) -> None:
    """The guard spent the one attended fail-open of this failure episode (at *epoch*)."""
    kv_set(conn, key(harness, "alarmed"), str(int(epoch or 0)))


def clear_failure(conn: sqlite3.Connection, harness: str) -> None:
    """Positive recovery: forget the failure notice and the attended alarm."""
    conn.execute("DELETE FROM kv WHERE key IN (?, ?)",
                 (key(harness, "notified"), key(harness, "alarmed")))


# --- readers' predicates ------------------------------------------------------------------------


def owner_live(entry: Claim) -> bool:
    from firstmate.store.identity import ProcessIdentity, matches

    ident = ProcessIdentity.parse(entry.owner_identity)
    return ident is not None and ident.pid == entry.owner_pid and matches(ident)


def stuck(entry: Claim, *, now: float, beacon_age: float | None, grace: float) -> bool:
    """The entry and the beacon are both older than *grace*: the owner hung mid-arm."""
    return now - entry.updated_at > grace and (beacon_age is None or beacon_age > grace)


def fresh(entry: Claim, *, now: float, window: float = DEFAULT_FRESH) -> bool:
    return 0 <= now - entry.updated_at <= window or entry.updated_at > now


def claim_facts(conn: sqlite3.Connection, harness: str, *, health: WatcherHealth, now: float,
                window: float = DEFAULT_FRESH) -> ClaimFacts:
    """The claim, the notice and the alarm as the guard's facts: *deciding* needs an ``arming``
    claim whose owner is live, identity-matched and not stuck (against *health*'s beacon);
    *window* is the freshness window in seconds."""
    entry = read(conn, harness)
    notified = notified_epoch(conn, harness) is not None
    alarmed = alarmed_epoch(conn, harness) is not None
    if entry is None:
        return ClaimFacts(notified=notified, alarmed=alarmed)
    deciding = (entry.outcome == "arming" and owner_live(entry)
                and not stuck(entry, now=now, beacon_age=health.beacon_age, grace=health.grace))
    return ClaimFacts(entry.epoch, entry.outcome, deciding, fresh(entry, now=now, window=window),
                      entry.outcome in FAILED_OUTCOMES, notified, alarmed)


__all__ = [
    "DEFAULT_FRESH",
    "FAILED_OUTCOMES",
    "OUTCOMES",
    "Claim",
    "ClaimFacts",
    "alarmed_epoch",
    "claim_facts",
    "claim_next",
    "clear_failure",
    "commit",
    "fresh",
    "key",
    "mark_alarmed",
    "mark_notified",
    "notified_epoch",
    "owner_live",
    "read",
    "stuck",
]
