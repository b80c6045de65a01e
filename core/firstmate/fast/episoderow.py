"""The recovery episode row as plain values, and the transitions appends, drains and
acknowledgements make.

The attrs-free core of :mod:`firstmate.store.episodes` (see its docstring for the whole transition
table): reading and writing the one ``episode`` row, minting generations,
:func:`publish_downtime`, :func:`begin_handling` and :func:`acknowledge`.
:mod:`firstmate.store.episodes` wraps these values in its classes; the ``fm wake append`` and
``fm wake drain`` fast paths call them directly.

A state is a ``(status, kind, generation)`` tuple for a valid row, ``None`` when no row was ever
written, or a ``str`` (the damaged row, verbatim) when the row is invalid.
"""

from __future__ import annotations

import os
import time

from firstmate.base import dbconn

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3

STATUSES = ("pending", "announced", "acked")
KINDS = ("downtime", "handling")
#: Longest generation accepted (ours are ~30 characters).
GENERATION_MAX = 128
#: What a generation is made of (``[A-Za-z0-9._-]+``).
GENERATION_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"

Row = tuple[str, str, str]
State = Row | str | None


def valid_generation(value: object) -> bool:
    # str.strip with the allowed characters leaves nothing exactly when every character is one
    # of them: the same test as a full match of [A-Za-z0-9._-]+, without importing re.
    return (
        isinstance(value, str)
        and 0 < len(value) <= GENERATION_MAX
        and not value.strip(GENERATION_CHARS)
    )


def new_generation() -> str:
    return f"{os.getpid()}.{int(time.time())}.{os.urandom(4).hex()}"


def _show(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return "" if value is None else str(value)


def read(conn: sqlite3.Connection) -> State:
    row = conn.execute("SELECT status, kind, generation FROM episode WHERE id = 1").fetchone()
    if row is None:
        return None
    status, kind, generation = row
    if status in STATUSES and kind in KINDS and valid_generation(generation):
        return str(status), str(kind), str(generation)
    return ":".join(_show(part) for part in row)


def write(conn: sqlite3.Connection, status: str, kind: str, generation: str, *,
          announced_seq: int | None = None) -> Row:
    if status == "announced" and announced_seq is None:
        announced_seq = dbconn.last_seq(conn)
    conn.execute(
        "INSERT INTO episode (id, status, kind, generation, announced_seq, updated_at) "
        "VALUES (1, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET status = excluded.status, "
        "kind = excluded.kind, generation = excluded.generation, "
        "announced_seq = excluded.announced_seq, updated_at = excluded.updated_at",
        (status, kind, generation, announced_seq, time.time()),
    )
    return status, kind, generation


def fresh(conn: sqlite3.Connection, status: str, kind: str, state: State) -> Row:
    """A new generation in *status*/*kind*; an invalid *state* is set aside first."""
    if isinstance(state, str):
        dbconn.set_aside(conn, "episode", state)
    return write(conn, status, kind, new_generation())


def publish_downtime(conn: sqlite3.Connection, *, append: bool = False) -> Row:
    """Record that the fleet may have gone unwatched (a watcher close, or *append* of a row)."""
    state = read(conn)
    if not isinstance(state, tuple) or state[0] == "acked":
        return fresh(conn, "pending", "downtime", state)
    status, kind, generation = state
    if status == "pending":
        if kind == "downtime":
            return state
        return write(conn, "pending", "downtime", generation)
    # announced
    if kind == "handling":
        # The handling turn may have been interrupted: owe exactly one more presentation on the
        # same generation, so the acknowledgement already printed for it stays valid.
        return write(conn, "pending", "downtime", generation)
    if append:
        # New durable work over an announced episode: a fresh generation so it resurfaces once.
        return fresh(conn, "pending", "downtime", state)
    return state


def announced_seq(conn: sqlite3.Connection) -> int | None:
    row = conn.execute("SELECT announced_seq FROM episode WHERE id = 1").fetchone()
    if row is None or not isinstance(row[0], int):
        return None
    return int(row[0])


def begin_handling(conn: sqlite3.Connection, expected: str | None = None) -> str:
    """Move a downtime episode to handling; the outcome's name (``started``, ``unchanged``,
    ``already-acked``, ``mismatch``, ``unusable``: see the table in
    :mod:`firstmate.store.episodes`)."""
    state = read(conn)
    if not isinstance(state, tuple):
        return "unusable"
    status, kind, generation = state
    if expected is not None and generation != expected:
        return "mismatch"
    if status == "acked":
        # Acknowledged after the successor started but before this confirmation ran.
        return "already-acked" if expected is not None else "unusable"
    if kind == "handling":
        return "unchanged"
    write(conn, status, "handling", generation, announced_seq=announced_seq(conn))
    return "started"


def acknowledge(conn: sqlite3.Connection, generation: str) -> str:
    """Retire the episode of *generation*: ``acked``, ``already-acked`` or ``mismatch``. The
    caller has checked that *generation* is well formed."""
    state = read(conn)
    if not isinstance(state, tuple) or state[2] != generation:
        return "mismatch"
    if state[0] == "acked":
        return "already-acked"
    write(conn, "acked", state[1], generation)
    return "acked"


def token(state: State) -> str:
    """How refusals name *state*: ``status:kind:generation``, ``invalid`` or ``none``."""
    if isinstance(state, tuple):
        return ":".join(state)
    return "invalid" if isinstance(state, str) else "none"


__all__ = ["GENERATION_MAX", "KINDS", "STATUSES", "acknowledge", "announced_seq",
           "begin_handling", "fresh", "new_generation", "publish_downtime", "read", "token",
           "valid_generation", "write"]
