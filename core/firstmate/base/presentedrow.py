"""What drains presented, as plain functions over a connection: the highest row each actor was
shown and the generations the acknowledgement commands named, kept in ``kv``.

Kept so an acknowledgement can refuse what nobody was asked for: both drain paths record here
and check here (:mod:`firstmate.base.wakedrain`, :mod:`firstmate.base.wakeack`), and a branch
grant that gives its rows back forgets its actor's record (:mod:`firstmate.store.grants`).
"""

from __future__ import annotations

from firstmate.base.dbconn import kv_get, kv_set
from firstmate.base.wakeactor import VALID_SQL

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate.base.dbconn import sqlite3

#: kv: the highest row a drain presented to an actor (``drain.presented.main`` / ``.branch``).
PRESENTED_KEY = "drain.presented."
#: kv: the generations drains named in acknowledgement commands, space-separated, newest last.
GENERATIONS_KEY = "drain.generations"
GENERATIONS_KEPT = 16


def _mark(raw: str | None) -> int:
    return int(raw) if raw is not None and raw.isascii() and raw.isdigit() else 0


def presented_through(conn: sqlite3.Connection, actor: str) -> int:
    """The highest row a drain presented to *actor* (0: none yet). For main, every row it
    claims was presented (only its drain claims), which also covers a home whose rows were
    presented before this record existed."""
    mark = _mark(kv_get(conn, PRESENTED_KEY + actor))
    if actor == "main":
        row = conn.execute(
            f"SELECT coalesce(max(seq), 0) FROM wakes WHERE claim = 'main' AND {VALID_SQL}"
        ).fetchone()
        mark = max(mark, int(row[0]))
    return mark


def forget_presented(conn: sqlite3.Connection, actor: str) -> None:
    """Rows given back (a grant released or dropped) must be presented again before an
    acknowledgement may take them."""
    conn.execute("DELETE FROM kv WHERE key = ?", (PRESENTED_KEY + actor,))


def printed_generations(conn: sqlite3.Connection) -> list[str]:
    return (kv_get(conn, GENERATIONS_KEY) or "").split()


def record(conn: sqlite3.Connection, actor: str, through: int, generation: str) -> None:
    """Remember what this drain presented and the generation its command named."""
    if through > _mark(kv_get(conn, PRESENTED_KEY + actor)):
        kv_set(conn, PRESENTED_KEY + actor, str(through))
    known = printed_generations(conn)
    if known[-1:] != [generation]:
        known = [g for g in known if g != generation] + [generation]
        kv_set(conn, GENERATIONS_KEY, " ".join(known[-GENERATIONS_KEPT:]))


__all__ = ["GENERATIONS_KEPT", "GENERATIONS_KEY", "PRESENTED_KEY", "forget_presented",
           "kv_get", "kv_set", "presented_through", "printed_generations", "record"]
