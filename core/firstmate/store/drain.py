"""Presenting queued wakes to an actor (drain: claim + present) and acknowledging them.

Every presented row is claimed by exactly one actor (``main`` or ``branch``, see
:mod:`firstmate.store.grants`) in the same transaction that presents it, and an acknowledgement only
ever deletes the acknowledging actor's own rows at or below its cutoff. A drain also records
(:mod:`firstmate.fast.drainsteps`) the highest row it presented to its actor and the generation
its acknowledgement command named: an acknowledgement through a row never presented is refused
whole (a usage error naming the right command), so a mistyped number never consumes a row nobody
saw. The generation binds only the episode: one that is neither the current episode's nor one a
drain printed still consumes the presented rows, retires nothing, and names the remedy. A drain bounds its wait for the queue lock with
``FM_STATUS_PRESENTATION_LOCK_TIMEOUT`` (default 10 s) and, when the bound runs out, changes
nothing and says so in one line; an acknowledgement waits as long as it must. The rows and the
lock are :mod:`firstmate.store.queue`'s.

The drain's logic is :mod:`firstmate.fast.drainsteps`, which the ``fm wake drain`` fast path
(:mod:`firstmate.fast.drainpath`) runs too: presenting claimed rows, the presented record,
checking and consuming an acknowledgement (the episode's moves are
:mod:`firstmate.fast.episoderow`'s). This module wraps it, adding what only the store's path
handles: grants, unusable rows and the value classes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import TextIO

import attrs

from firstmate.base.envnum import decimal
from firstmate.base.errors import FirstmateError, LockTimeout, UsageError
from firstmate.fast import drainsteps, drainview
from firstmate.fast.wakeactor import (
    UNCLAIMED_SQL,
    ack_command,
    ack_required,
    command_suffix,
    lock_timeout,
    refuse_crew,
    resolve_actor,
    skip_line,
)
from firstmate.store import episodes
from firstmate.store.database import Store
from firstmate.store.queue import WakeRow, dedupe, locked, retire, scan, sql_unusable


@attrs.frozen
class DrainResult:
    """What one drain presented. ``ack_command`` is None when nothing needs acknowledging."""

    actor: str
    rows: tuple[WakeRow, ...] = ()
    ack_through: int | None = None
    generation: str | None = None
    ack_command: str | None = None
    #: Diagnostics for stderr (retired unusable rows, a reclaimed grant).
    notices: tuple[str, ...] = ()
    #: The one-line WAKE ROWS HELD BY SUPERVISION BRANCH advisory (stdout).
    held: str | None = None
    #: The one-line WAKE DRAIN SKIPPED advisory (stdout); nothing was changed.
    skipped: str | None = None
    #: What the recovery episode behind this drain means, in plain words (stdout, first;
    #: :func:`firstmate.fast.drainview.episode_note`).
    note: str | None = None

    @property
    def ack_required(self) -> str | None:
        return ack_required(self.ack_command)

    def explain(self) -> list[str]:
        """The plain lines that say what this drain's rows mean: the episode's note, then one
        per kind shown."""
        return [*([self.note] if self.note else []),
                *drainview.explanations(row.kind for row in self.rows)]

    def to_json(self) -> dict[str, object]:
        return {
            "actor": self.actor, "rows": [r.to_json() for r in self.rows],
            "ack_through": self.ack_through, "generation": self.generation,
            "ack_command": self.ack_command, "ack_required": self.ack_required,
            "notices": list(self.notices), "held": self.held, "skipped": self.skipped,
            "explain": self.explain(),
        }

    def emit(self, out: TextIO, err: TextIO, context: Sequence[str]) -> None:
        """Print this drain as lines (:func:`firstmate.fast.drainview.emit`), *context* after
        the rows; the notices go first, to *err*."""
        if self.notices:
            err.write("".join(line + "\n" for line in self.notices))
            err.flush()
        drainview.emit(out, err, [(r.seq, r.kind, r.key, r.payload) for r in self.rows],
                       note=self.note, held=self.held, command=self.ack_command, context=context)


@attrs.frozen
class AckResult:
    actor: str
    through: int
    generation: str
    #: Rows this acknowledgement deleted.
    consumed: int
    #: The episode of *generation* is retired (by this call or already).
    retired: bool
    #: The episode moved on to another generation; the notices name the remedy.
    moved: bool
    notices: tuple[str, ...] = ()
    #: The one-line confirmation (stdout) when there is no notice to give instead.
    confirmation: str | None = None
    #: Rows still queued after it.
    remaining: int = 0
    #: The episode after it: ``status:kind:generation``, ``invalid`` or ``none``.
    episode: str = "none"

    def to_json(self) -> dict[str, object]:
        return {"actor": self.actor, "through": self.through, "generation": self.generation,
                "consumed": self.consumed, "retired": self.retired, "moved": self.moved,
                "notices": list(self.notices), "confirmation": self.confirmation,
                "remaining": self.remaining, "episode": self.episode}


# --- drain -----------------------------------------------------------------------------------


def drain(
    db: Store,
    actor: str | None = None,
    *,
    timeout: int | None = None,
    env: Mapping[str, str] | None = None,
) -> DrainResult:
    """Claim and present this actor's rows (see the module docstring and docs/cli.md).

    *timeout* bounds the queue-lock wait (default ``FM_STATUS_PRESENTATION_LOCK_TIMEOUT``); when
    it runs out the result carries only :attr:`DrainResult.skipped` and nothing changed.
    """
    refuse_crew(env)
    actor = resolve_actor(actor, env)
    bound = lock_timeout(env) if timeout is None else timeout
    try:
        with locked(db, timeout=bound) as conn:
            return drain_locked(conn, db, actor, env=env)
    except LockTimeout as exc:
        return DrainResult(actor=actor, skipped=skip_line(exc.holder_pid, bound))


def follow(db: Store, env: Mapping[str, str] | None = None) -> None:
    """After a main drain's output was written and its crew-status marks advanced: record the
    delivery it came after and ring a handling successor that may hold a wake for it
    (:func:`firstmate.fast.drainsteps.follow`; best effort, docs/watcher.md)."""
    home = db.home
    conn = db.connection()
    drainsteps.follow(conn, str(db.path), str(home.state), str(home.root),
                      float(lock_timeout(env)))


def _reclaim_gone_grant(conn: sqlite3.Connection) -> list[str]:
    """Main takes back the rows of a branch grant whose owner is gone; the notice saying so."""
    from firstmate.store import grants

    gone = grants.reclaim_if_gone(conn)
    if gone is None:
        return []
    return [f"wake drain: reclaimed the supervision branch grant of gone pid {gone.owner_pid} "
            f"(generation {gone.generation}); its rows return to main"]


def drain_locked(
    conn: sqlite3.Connection, db: Store, actor: str, *, env: Mapping[str, str] | None = None
) -> DrainResult:
    from firstmate.store import grants

    notices: list[str] = []
    if actor == "main":
        notices += _reclaim_gone_grant(conn)
    else:
        _require_branch_grant(conn)
    usable, bad = scan(conn)
    if actor == "main":
        report, retired = retire(conn, bad, "wake drain")
        notices += report
        if any(c is None for _, c in usable):
            if not retired:
                # Unusable rows stayed: claim exactly the rows that were read as usable.
                conn.executemany("UPDATE wakes SET claim = 'main' WHERE seq = ?",
                                 [(r.seq,) for r, c in usable if c is None])
            else:
                conn.execute(f"UPDATE wakes SET claim = 'main' WHERE {UNCLAIMED_SQL}")
        mine = [r for r, c in usable if c in (None, "main")]
    else:
        mine = [r for r, c in usable if c == "branch"]
        if not mine:
            _refuse_empty_grant(conn)
    suffix = command_suffix(actor, env)
    if not usable:
        return _drain_episode_only(conn, actor, notices, suffix)
    if not mine:
        held = [r.seq for r, c in usable if c == "branch"]
        return DrainResult(actor=actor, notices=tuple(notices), held=grants.held_line(held))
    shown = tuple(dedupe(mine))
    through, generation, command, note = drainsteps.present(
        conn, actor, max(r.seq for r in mine), suffix, len(shown))
    return DrainResult(
        actor=actor,
        rows=shown,
        ack_through=through,
        generation=generation,
        ack_command=command,
        notices=tuple(notices),
        note=note,
    )


def _drain_episode_only(
    conn: sqlite3.Connection, actor: str, notices: list[str], suffix: str
) -> DrainResult:
    """No rows: an open episode still needs its generation-bound acknowledgement."""
    presented = drainsteps.episode_only(conn, actor, suffix)
    if presented is None:
        return DrainResult(actor=actor, notices=tuple(notices))
    through, generation, command, note = presented
    return DrainResult(actor=actor, ack_through=through, generation=generation,
                       ack_command=command, notices=tuple(notices), note=note)


def _require_branch_grant(conn: sqlite3.Connection) -> None:
    from firstmate.store import grants

    grant = grants.read(conn)
    if grant is None:
        raise FirstmateError(
            "wake drain: the branch actor has no supervision grant; refusing to guess what this "
            "actor may consume (activate and publish a grant first, or drain as main)"
        )
    if grants.owner_state(grant) == "gone":
        raise FirstmateError(
            f"wake drain: the supervision branch grant's owner pid {grant.owner_pid} is gone "
            f"(generation {grant.generation}); main reclaims its rows on its next drain"
        )


def _refuse_empty_grant(conn: sqlite3.Connection) -> None:
    from firstmate.store import grants

    grant = grants.read(conn)
    assert grant is not None
    if grant.published:
        raise FirstmateError(
            f"wake drain: the supervision branch grant (generation {grant.generation}) holds no "
            "rows: its acknowledgement already consumed them; nothing to present"
        )
    raise FirstmateError(
        f"wake drain: the supervision branch grant (generation {grant.generation}) has no "
        "published rows; refusing to guess what this actor may consume"
    )


# --- acknowledge -----------------------------------------------------------------------------


def parse_through(value: str | int) -> int:
    through = decimal(str(value))
    if through is None:
        raise UsageError("wake drain: invalid acknowledgement sequence (expected a decimal number "
                         "below 2^63)")
    return through


def acknowledge(
    db: Store,
    actor: str | None,
    through: int | str,
    generation: str,
    *,
    env: Mapping[str, str] | None = None,
) -> AckResult:
    """Delete this actor's presented rows at or below *through*; retire the episode of
    *generation* when it is still the open one and no rows remain. Waits for the queue lock as
    long as it must. A cutoff beyond the last row presented to the actor is a
    :class:`UsageError` and changes nothing; a generation that is not the open episode's retires
    nothing, and the notices name the remedy."""
    refuse_crew(env)
    actor = resolve_actor(actor, env)
    cutoff = parse_through(through)
    episodes.require_generation(generation)
    with locked(db) as conn:
        return acknowledge_locked(conn, actor, cutoff, generation, env=env)


def acknowledge_locked(
    conn: sqlite3.Connection,
    actor: str,
    cutoff: int,
    generation: str,
    *,
    env: Mapping[str, str] | None = None,
) -> AckResult:
    from firstmate.store import grants

    notices: list[str] = []
    if actor == "main":
        notices += _reclaim_gone_grant(conn)
        notices += retire(conn, sql_unusable(conn), "wake drain")[0]
    elif grants.read(conn) is None:
        raise FirstmateError(
            "wake drain: the branch actor has no supervision grant to acknowledge from; "
            "nothing was acknowledged"
        )
    suffix = command_suffix(actor, env)
    drainsteps.check(conn, actor, cutoff, suffix)
    consumed, retired, moved, more, said = drainsteps.consume(conn, actor, cutoff, generation, suffix)
    notices += more
    remaining, episode = drainsteps.after(conn)
    return AckResult(actor=actor, through=cutoff, generation=generation, consumed=consumed,
                     retired=retired, moved=moved, notices=tuple(notices),
                     confirmation=said, remaining=remaining, episode=episode)


__all__ = [
    "AckResult",
    "DrainResult",
    "ack_command",
    "acknowledge",
    "acknowledge_locked",
    "drain",
    "drain_locked",
    "parse_through",
]
