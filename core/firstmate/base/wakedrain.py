"""Presenting claimed wake rows to an actor, as plain functions over plain values.

The attrs-free core of :func:`firstmate.store.drain.drain_locked` and of the ``fm wake drain``
fast path (:mod:`firstmate.base.drainpath`). Inside the queue lock and one write transaction,
once the actor's rows are claimed: :func:`present` opens (or reuses) the recovery episode, moves
it to handling and records what was presented; :func:`episode_only` does the same for an open
episode when no rows are queued. Both say, in plain words, what the episode they found means
(:func:`firstmate.base.drainview.episode_note`). :func:`dedupe` picks the rows shown, and
:func:`line` is a row's fields as ``fm wake query`` shows them.
"""

from __future__ import annotations

from firstmate.base import episoderow
from firstmate.base.presentedrow import record
from firstmate.base.wakeactor import VALID_SQL, ack_command
from firstmate.base.wakeinput import clean

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import TypeVar

    from firstmate.base.dbconn import sqlite3

    T = TypeVar("T")

#: What an acknowledgement needs, ``(through, generation, command)``, and the episode's plain
#: note (:func:`firstmate.base.drainview.episode_note`; None: nothing to say).
Presented = tuple[int, str, str, "str | None"]


def note(conn: sqlite3.Connection, actor: str, state: episoderow.State, through: int,
         shown: int) -> str | None:
    """What the episode *state* (before this drain moves it) means for the *shown* rows (up to
    *through*, claimed for *actor*), in plain words."""
    from firstmate.base.drainview import episode_note

    oldest = None
    if shown and isinstance(state, tuple) and state[0] == "announced":
        oldest = conn.execute(f"SELECT min(at) FROM wakes WHERE claim = ? AND seq <= ? AND "
                              f"{VALID_SQL}", (actor, through)).fetchone()[0]
    return episode_note(state, shown, oldest)


def present(conn: sqlite3.Connection, actor: str, through: int, suffix: str,
            shown: int) -> Presented:
    """Rows up to *through* were claimed for *actor* (*shown* of them are shown, deduped): the
    episode they are handled under (a fresh downtime one when none is open) moves to
    handling, and the drain is recorded."""
    state = episoderow.read(conn)
    said = note(conn, actor, state, through, shown)
    if not isinstance(state, tuple) or state[0] == "acked":
        state = episoderow.publish_downtime(conn)
    episoderow.begin_handling(conn)
    generation = state[2]
    record(conn, actor, through, generation)
    return through, generation, ack_command(through, generation, suffix), said


def episode_only(conn: sqlite3.Connection, actor: str, suffix: str) -> Presented | None:
    """No rows: an open episode still needs its generation-bound acknowledgement (None: no
    episode is open, nothing to acknowledge)."""
    state = episoderow.read(conn)
    if not isinstance(state, tuple) or state[0] == "acked":
        return None
    said = note(conn, actor, state, 0, 0)
    if state[1] == "downtime":
        episoderow.begin_handling(conn)
    record(conn, actor, 0, state[2])
    return 0, state[2], ack_command(0, state[2], suffix), said


def dedupe(rows: Iterable[tuple[str, str, T]]) -> list[T]:
    """One row per (kind, key), in first-seen order, showing the last row; heartbeats collapse.
    *rows* are ``(kind, key, row)``."""
    view: dict[tuple[str, str], T] = {}
    for kind, key, row in rows:
        view[("heartbeat", "") if kind == "heartbeat" else (kind, key)] = row
    return list(view.values())


def line(seq: int, kind: str, key: str, payload: str) -> str:
    """A row's fields, ``<seq>\\t<kind>\\t<key>\\t<payload>``, each on one line (``fm wake
    query``'s oldest row; a drain shows rows as :mod:`firstmate.base.drainview` words them)."""
    return f"{seq}\t{clean(kind)}\t{clean(key)}\t{clean(payload)}"


__all__ = ["Presented", "dedupe", "episode_only", "line", "note", "present"]
