"""Presenting claimed wake rows to an actor, as plain functions over plain values.

The attrs-free core of :func:`firstmate.store.drain.drain_locked` and of the ``fm wake drain``
fast path (:mod:`firstmate.base.drainpath`). Inside the queue lock and one write transaction,
once the actor's rows are claimed: :func:`present` opens (or reuses) the recovery episode, moves
it to handling and records what was presented; :func:`episode_only` does the same for an open
episode when no rows are queued; :func:`dedupe`, :func:`line` and :func:`pieces` make what is printed.
"""

from __future__ import annotations

from firstmate.base import episoderow
from firstmate.base.presentedrow import record
from firstmate.base.wakeactor import ack_command
from firstmate.base.wakeinput import clean

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence
    from typing import Any, TypeVar

    from firstmate.base.dbconn import sqlite3

    T = TypeVar("T")

#: What an acknowledgement needs: ``(through, generation, command)``.
Presented = tuple[int, str, str]


def present(conn: sqlite3.Connection, actor: str, through: int, suffix: str) -> Presented:
    """Rows up to *through* were claimed for *actor*: the episode they are handled under (a
    fresh downtime one when none is open) moves to handling, and the drain is recorded."""
    state = episoderow.read(conn)
    if not isinstance(state, tuple) or state[0] == "acked":
        state = episoderow.publish_downtime(conn)
    episoderow.begin_handling(conn)
    generation = state[2]
    record(conn, actor, through, generation)
    return through, generation, ack_command(through, generation, suffix)


def episode_only(conn: sqlite3.Connection, actor: str, suffix: str) -> Presented | None:
    """No rows: an open episode still needs its generation-bound acknowledgement (None: no
    episode is open, nothing to acknowledge)."""
    state = episoderow.read(conn)
    if not isinstance(state, tuple) or state[0] == "acked":
        return None
    if state[1] == "downtime":
        episoderow.begin_handling(conn)
    record(conn, actor, 0, state[2])
    return 0, state[2], ack_command(0, state[2], suffix)


def dedupe(rows: Iterable[tuple[str, str, T]]) -> list[T]:
    """One row per (kind, key), in first-seen order, showing the last row; heartbeats collapse.
    *rows* are ``(kind, key, row)``."""
    view: dict[tuple[str, str], T] = {}
    for kind, key, row in rows:
        view[("heartbeat", "") if kind == "heartbeat" else (kind, key)] = row
    return list(view.values())


def line(seq: int, kind: str, key: str, payload: str) -> str:
    """The presentation line ``<seq>\\t<kind>\\t<key>\\t<payload>``."""
    return f"{seq}\t{clean(kind)}\t{clean(key)}\t{clean(payload)}"


def pieces(rows: Sequence[tuple[Any, ...]]) -> Iterator[str]:
    """The presentation lines of *rows* (``(seq, kind, key, payload, ...)``): what :func:`line`
    makes of each row, each ending in a newline, in pieces of :data:`PIECE_ROWS` rows. A piece
    whose every field is printable ASCII (which :func:`~firstmate.base.wakeinput.clean` leaves
    as it is) is built at once. Each piece is made when it is asked for, because a drain of
    thousands of rows is a fresh process: a piece written and dropped before the next is built
    lends that one its memory (its strings, its bytes, the stream's encoding of it) instead of
    the process faulting in new pages for the whole text."""
    for start in range(0, len(rows), PIECE_ROWS):
        part = rows[start:start + PIECE_ROWS]
        joined = "".join([f"{r[0]}\t{r[1]}\t{r[2]}\t{r[3]}\n" for r in part])
        if not plain(joined, len(part)):
            joined = "".join([line(r[0], r[1], r[2], r[3]) + "\n" for r in part])
        yield joined


#: Rows per piece of :func:`pieces`: about 100 KB of lines for typical rows.
PIECE_ROWS = 1000


def plain(lines: str, count: int) -> bool:
    """*lines* (*count* presentation lines, each ending in a newline) are what :func:`line`
    would make of their fields: every field is printable ASCII, which
    :func:`~firstmate.base.wakeinput.clean` leaves as it is. The separators are counted
    exactly, so no field holds a TAB or a line break of its own."""
    if not lines.isascii():
        return False
    # What is left once every printable ASCII character is deleted (one C pass over bytes):
    # exactly the separators, or a field holds something clean() would change.
    rest = lines.encode("ascii").translate(None, _PRINTABLE)
    return len(rest) == 4 * count and rest.count(b"\t") == 3 * count


_PRINTABLE = bytes(range(0x20, 0x7F))


__all__ = ["PIECE_ROWS", "Presented", "dedupe", "episode_only", "line", "pieces", "plain",
           "present"]
