"""Acknowledging presented wake rows, as plain functions over a connection.

The attrs-free core of :func:`firstmate.store.drain.acknowledge_locked` and of the ``fm wake
drain --ack-through`` fast path (:mod:`firstmate.base.drainpath`). Both run inside the queue
lock and one write transaction: :func:`check` refuses, before anything is consumed, an
acknowledgement through rows nobody was shown; :func:`consume` deletes the actor's presented
rows up to the cutoff, retires the episode when no rows remain, and says what the caller must
know: a notice when something went otherwise than asked, else the one-line confirmation
(:func:`firstmate.base.drainview.ack_line`: what was consumed, the episode, what is still
queued).

The generation binds only the episode part. Rows the actor was shown and handled are consumed
whatever generation the command names: a generation no drain printed (mistyped, made up) or an
older printed one retires nothing, and the notice names the remedy, so handled rows never come
back because of a wrong episode name.
"""

from __future__ import annotations

from firstmate.base import episoderow
from firstmate.base.presentedrow import presented_through, printed_generations
from firstmate.base.wakeactor import VALID_SQL, ack_command

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate.base.dbconn import sqlite3

#: What :func:`consume` did: rows deleted, episode retired, episode moved on, notices (stderr),
#: and the one-line confirmation (stdout; None when a notice says what happened instead).
Consumed = tuple[int, bool, bool, list[str], "str | None"]


def _open(state: episoderow.State) -> bool:
    return isinstance(state, tuple) and state[0] != "acked"


def remedy(conn: sqlite3.Connection, actor: str, through: int, suffix: str) -> str:
    """What to run instead: the exact acknowledgement when this actor still has presented rows
    and the current episode is the one the last drain named, else a fresh drain."""
    state = episoderow.read(conn)
    waiting = conn.execute(
        f"SELECT count(*) FROM wakes WHERE claim = ? AND seq <= ? AND {VALID_SQL}",
        (actor, through),
    ).fetchone()[0]
    if (isinstance(state, tuple) and _open(state) and waiting
            and printed_generations(conn)[-1:] == [state[2]]):
        return f"run {ack_command(through, state[2], suffix)} after handling it"
    return f"re-run fm wake drain{suffix} and use the WAKE_ACK_REQUIRED command it prints"


def check(conn: sqlite3.Connection, actor: str, cutoff: int, suffix: str) -> None:
    """Refuse (:class:`~firstmate.base.errors.UsageError`), before anything is consumed, an
    acknowledgement through rows nobody was shown."""
    from firstmate.base.errors import UsageError

    last = presented_through(conn, actor)
    if cutoff > last:
        raise UsageError(
            f"wake drain: --ack-through {cutoff} is beyond the last wake row presented to you "
            f"({last or 'none'}); nothing was acknowledged: {remedy(conn, actor, last, suffix)}"
        )


def consume(conn: sqlite3.Connection, actor: str, cutoff: int, generation: str,
            suffix: str) -> Consumed:
    """Delete *actor*'s presented rows at or below *cutoff*; retire the episode of *generation*
    when it is still the open one and no rows remain."""
    row = conn.execute(
        f"SELECT coalesce(max(seq), 0) FROM wakes WHERE claim = ? AND {VALID_SQL}", (actor,)
    ).fetchone()
    presented_max = int(row[0])
    # Only rows presented to this actor: a row appended since its drain (unowned, or handed
    # back by a grant) waits for the next drain, whatever the cutoff.
    others = conn.execute(
        "SELECT count(*) FROM wakes WHERE claim IS NOT ? OR seq > ?", (actor, cutoff)
    ).fetchone()[0]
    if not others and not conn.execute(
            f"SELECT count(*) FROM wakes WHERE NOT {VALID_SQL}").fetchone()[0]:
        # Every queued row goes: SQLite empties the table whole instead of row by row.
        consumed = conn.execute("DELETE FROM wakes").rowcount
    else:
        consumed = conn.execute(
            f"DELETE FROM wakes WHERE claim = ? AND seq <= ? AND {VALID_SQL}", (actor, cutoff)
        ).rowcount
    remaining = int(conn.execute("SELECT count(*) FROM wakes").fetchone()[0])
    state = episoderow.read(conn)
    known = (isinstance(state, tuple) and state[2] == generation) or \
        generation in printed_generations(conn)
    retired = moved = False
    open_elsewhere = _open(state) and isinstance(state, tuple) and state[2] != generation
    if remaining == 0 and state is not None:
        retired = episoderow.acknowledge(conn, generation) != "mismatch"
        moved = not retired and (open_elsewhere or isinstance(state, str))
    else:
        moved = open_elsewhere
    state = episoderow.read(conn)
    notices: list[str] = []
    if consumed == 0 and presented_max > cutoff:
        head = (
            f"wake drain: nothing was acknowledged through {cutoff} (none of your presented wake"
            f" rows is at or below it); the current wake is row {presented_max}: "
        )
        if isinstance(state, tuple) and _open(state):
            notices.append(head + f"run {ack_command(presented_max, state[2], suffix)} after handling it")
        else:
            notices.append(head + f"re-run fm wake drain{suffix} and use the WAKE_ACK_REQUIRED command it prints")
    elif not known:
        # Never printed by a drain: the episode part is refused; the rows were still handled.
        head = (f"wake drain: acknowledged wakes through {cutoff} ({consumed} row(s) consumed), "
                f"but recovery generation {generation} was never printed by a drain (the current "
                f"episode is {episoderow.token(state)})")
        if isinstance(state, tuple) and _open(state):
            notices.append(head + ", so the episode stays open: "
                           + remedy(conn, actor, presented_max, suffix))
        else:
            notices.append(head + "; nothing to retire")
    elif (not retired and not moved and remaining == 0 and isinstance(state, tuple)
            and state[2] != generation):
        notices.append(
            f"wake drain: recovery generation {generation} is not the current episode "
            f"({episoderow.token(state)}); nothing more to retire"
        )
    elif moved:
        notices.append(
            f"wake drain: acknowledged wakes through {cutoff} ({consumed} row(s) consumed), but a "
            f"newer recovery episode is pending; re-run fm wake drain{suffix} and use the new "
            "WAKE_ACK_REQUIRED command"
        )
    said = None
    if not notices:
        from firstmate.base.drainview import ack_line

        said = ack_line(cutoff, consumed, retired, remaining, state, suffix)
    return consumed, retired, moved, notices, said


def after(conn: sqlite3.Connection) -> tuple[int, str]:
    """The rows still queued and the episode's token (``status:kind:generation``, ``invalid``
    or ``none``), as an acknowledgement leaves them."""
    remaining = int(conn.execute("SELECT count(*) FROM wakes").fetchone()[0])
    return remaining, episoderow.token(episoderow.read(conn))


__all__ = ["Consumed", "after", "check", "consume", "remedy"]
