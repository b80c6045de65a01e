"""Presenting queued wakes to an actor (drain: claim + present) and acknowledging them.

Every presented row is claimed by exactly one actor (``main`` or ``branch``, see
:mod:`firstmate.store.grants`) in the same transaction that presents it, and an acknowledgement only
ever deletes the acknowledging actor's own rows at or below its cutoff. A drain also records
(:mod:`firstmate.store.presented`) the highest row it presented to its actor and the generation
its acknowledgement command named: an acknowledgement through a row never presented, or naming a
generation that is neither the current episode's nor one a drain printed, is refused whole (a
usage error naming the right command), so a mistyped number or generation never consumes a row
nobody saw. A drain bounds its wait for the queue lock with
``FM_STATUS_PRESENTATION_LOCK_TIMEOUT`` (default 10 s) and, when the bound runs out, changes
nothing and says so in one line; an acknowledgement waits as long as it must. The rows and the
lock are :mod:`firstmate.store.queue`'s.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

import attrs

from firstmate.base.envnum import decimal
from firstmate.base.errors import FirstmateError, LockTimeout, UsageError
from firstmate.store import episodes
from firstmate.store.database import Store
from firstmate.store.presented import presented_through, printed_generations, record
from firstmate.store.queue import (
    UNCLAIMED_SQL,
    VALID_SQL,
    WakeRow,
    command_suffix,
    dedupe,
    lock_timeout,
    locked,
    resolve_actor,
    retire,
    scan,
    sql_unusable,
)


def ack_command(through: int, generation: str, suffix: str = "") -> str:
    return f"fm wake drain --ack-through {through} --recovery-generation {generation}{suffix}"


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

    @property
    def ack_required(self) -> str | None:
        if self.ack_command is None:
            return None
        return f"WAKE_ACK_REQUIRED: after handling completes run {self.ack_command}"

    def to_json(self) -> dict[str, object]:
        return {
            "actor": self.actor, "rows": [r.to_json() for r in self.rows],
            "ack_through": self.ack_through, "generation": self.generation,
            "ack_command": self.ack_command, "ack_required": self.ack_required,
            "notices": list(self.notices), "held": self.held, "skipped": self.skipped,
        }


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

    def to_json(self) -> dict[str, object]:
        return {"actor": self.actor, "through": self.through, "generation": self.generation,
                "consumed": self.consumed, "retired": self.retired, "moved": self.moved,
                "notices": list(self.notices)}


# --- drain -----------------------------------------------------------------------------------


def _skip_line(exc: LockTimeout, bound: int) -> str:
    if exc.holder_pid:
        who = f"queue lock remains held by live pid {exc.holder_pid}"
    else:
        who = "queue lock remains held by another process"
    return f"WAKE DRAIN SKIPPED: {who} after {bound}s; retry on the next drain."


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
    actor = resolve_actor(actor, env)
    bound = lock_timeout(env) if timeout is None else timeout
    try:
        with locked(db, timeout=bound) as conn:
            result = drain_locked(conn, db, actor, env=env)
    except LockTimeout as exc:
        return DrainResult(actor=actor, skipped=_skip_line(exc, bound))
    return result


def drain_locked(
    conn: sqlite3.Connection, db: Store, actor: str, *, env: Mapping[str, str] | None = None
) -> DrainResult:
    from firstmate.store import grants

    notices: list[str] = []
    if actor == "main":
        gone = grants.reclaim_if_gone(conn)
        if gone is not None:
            notices.append(
                f"wake drain: reclaimed the supervision branch grant of gone pid {gone.owner_pid} "
                f"(generation {gone.generation}); its rows return to main"
            )
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
    state = episodes.read(conn)
    if not isinstance(state, episodes.Episode) or state.status == "acked":
        state = episodes.publish_downtime(conn)
    episodes.begin_handling(conn)
    generation = state.generation
    through = max(r.seq for r in mine)
    record(conn, actor, through, generation)
    return DrainResult(
        actor=actor,
        rows=tuple(dedupe(mine)),
        ack_through=through,
        generation=generation,
        ack_command=ack_command(through, generation, suffix),
        notices=tuple(notices),
    )


def _drain_episode_only(
    conn: sqlite3.Connection, actor: str, notices: list[str], suffix: str
) -> DrainResult:
    """No rows: an open episode still needs its generation-bound acknowledgement."""
    state = episodes.read(conn)
    if not isinstance(state, episodes.Episode) or not state.open:
        return DrainResult(actor=actor, notices=tuple(notices))
    if state.kind == "downtime":
        episodes.begin_handling(conn)
    record(conn, actor, 0, state.generation)
    return DrainResult(
        actor=actor, ack_through=0, generation=state.generation,
        ack_command=ack_command(0, state.generation, suffix), notices=tuple(notices),
    )


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
    long as it must. A cutoff beyond the last row presented to the actor, or a generation that
    is neither the current episode's nor one a drain printed, is a :class:`UsageError` and
    changes nothing."""
    actor = resolve_actor(actor, env)
    cutoff = parse_through(through)
    episodes.require_generation(generation)
    with locked(db) as conn:
        return acknowledge_locked(conn, actor, cutoff, generation, env=env)


def _remedy(conn: sqlite3.Connection, actor: str, through: int, suffix: str) -> str:
    """What to run instead: the exact acknowledgement when this actor still has presented rows
    and the current episode is the one the last drain named, else a fresh drain."""
    state = episodes.read(conn)
    waiting = conn.execute(
        f"SELECT count(*) FROM wakes WHERE claim = ? AND seq <= ? AND {VALID_SQL}",
        (actor, through),
    ).fetchone()[0]
    if (isinstance(state, episodes.Episode) and state.open and waiting
            and printed_generations(conn)[-1:] == [state.generation]):
        return f"run {ack_command(through, state.generation, suffix)} after handling it"
    return f"re-run fm wake drain{suffix} and use the WAKE_ACK_REQUIRED command it prints"


def _check_request(
    conn: sqlite3.Connection, actor: str, cutoff: int, generation: str, suffix: str
) -> None:
    """Refuse, before anything is consumed, an acknowledgement nobody was asked for."""
    state = episodes.read(conn)
    last = presented_through(conn, actor)
    current = state.generation if isinstance(state, episodes.Episode) else None
    if generation != current and generation not in printed_generations(conn):
        shown = state.token() if isinstance(state, episodes.Episode) else (
            "invalid" if isinstance(state, episodes.Invalid) else "none")
        raise UsageError(
            f"wake drain: unknown recovery generation {generation} (the current episode is "
            f"{shown}); nothing was acknowledged: {_remedy(conn, actor, min(cutoff, last), suffix)}"
        )
    if cutoff > last:
        raise UsageError(
            f"wake drain: --ack-through {cutoff} is beyond the last wake row presented to you "
            f"({last or 'none'}); nothing was acknowledged: {_remedy(conn, actor, last, suffix)}"
        )


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
        gone = grants.reclaim_if_gone(conn)
        if gone is not None:
            notices.append(
                f"wake drain: reclaimed the supervision branch grant of gone pid {gone.owner_pid} "
                f"(generation {gone.generation}); its rows return to main"
            )
        notices += retire(conn, sql_unusable(conn), "wake drain")[0]
    elif grants.read(conn) is None:
        raise FirstmateError(
            "wake drain: the branch actor has no supervision grant to acknowledge from; "
            "nothing was acknowledged"
        )
    suffix = command_suffix(actor, env)
    _check_request(conn, actor, cutoff, generation, suffix)
    row = conn.execute(
        f"SELECT coalesce(max(seq), 0) FROM wakes WHERE claim = ? AND {VALID_SQL}", (actor,)
    ).fetchone()
    presented_max = int(row[0])
    # Only rows presented to this actor: a row appended since its drain (unowned, or handed
    # back by a grant) waits for the next drain, whatever the cutoff.
    consumed = conn.execute(
        f"DELETE FROM wakes WHERE claim = ? AND seq <= ? AND {VALID_SQL}", (actor, cutoff)
    ).rowcount
    remaining = int(conn.execute("SELECT count(*) FROM wakes").fetchone()[0])
    state = episodes.read(conn)
    retired = moved = False
    open_elsewhere = (
        isinstance(state, episodes.Episode) and state.open and state.generation != generation
    )
    if remaining == 0 and isinstance(state, episodes.Episode | episodes.Invalid):
        retired = episodes.acknowledge(conn, generation) is not episodes.Ack.MISMATCH
        moved = not retired and (open_elsewhere or isinstance(state, episodes.Invalid))
    else:
        moved = open_elsewhere
    state = episodes.read(conn)
    if consumed == 0 and presented_max > cutoff:
        head = (
            f"wake drain: nothing was acknowledged through {cutoff} (none of your presented wake"
            f" rows is at or below it); the current wake is row {presented_max}: "
        )
        if isinstance(state, episodes.Episode) and state.open:
            notices.append(head + f"run {ack_command(presented_max, state.generation, suffix)} after handling it")
        else:
            notices.append(head + f"re-run fm wake drain{suffix} and use the WAKE_ACK_REQUIRED command it prints")
    elif not retired and not moved and remaining == 0 and isinstance(state, episodes.Episode) \
            and state.generation != generation:
        notices.append(
            f"wake drain: recovery generation {generation} is not the current episode "
            f"({state.token()}); nothing more to retire"
        )
    elif moved:
        notices.append(
            f"wake drain: acknowledged wakes through {cutoff} ({consumed} row(s) consumed), but a "
            f"newer recovery episode is pending; re-run fm wake drain{suffix} and use the new "
            "WAKE_ACK_REQUIRED command"
        )
    return AckResult(actor=actor, through=cutoff, generation=generation, consumed=consumed,
                     retired=retired, moved=moved, notices=tuple(notices))


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
