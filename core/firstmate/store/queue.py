"""The durable wake queue: its rows, the queue lock, append, and read-only queries.

A row is ``seq`` (monotonic, never reused), ``at`` (epoch seconds), ``kind`` (signal, stale,
check, heartbeat), ``key`` and ``payload`` (the reason line). Two actors consume the queue:
``main`` (the primary session) and ``branch`` (a supervision branch holding a grant, see
:mod:`firstmate.store.grants`). Every presented row is claimed by exactly one actor in the same
transaction that presents it, and an acknowledgement only ever deletes the acknowledging actor's
own rows at or below its cutoff.

Every mutation holds the queue lock (``state/queue.lock``, a kernel lock that dies with its
holder) *and* a ``BEGIN IMMEDIATE`` transaction, so a process killed at any instant leaves the
whole step or none of it. Appends and acknowledgements wait for the lock as long as they must; a
drain bounds its wait with ``FM_STATUS_PRESENTATION_LOCK_TIMEOUT`` (default 10 s) and, when the
bound runs out, changes nothing and says so in one line.

Presenting rows to an actor and acknowledging them is :mod:`firstmate.store.drain`. Appending is
:mod:`firstmate.fast.appendpath` (attrs-free, shared with the ``fm wake append`` fast
path); the input rules are :mod:`firstmate.base.wakeinput`; the actors, the SQL predicates
and the drain's lock bound are :mod:`firstmate.fast.wakeactor`. All are re-exported here.

Text hygiene: keys and payloads are stored on one line. TAB, CR, LF and other line breaks become
spaces, terminal escape sequences and other control characters are removed, and a payload longer
than :data:`PAYLOAD_MAX` characters is cut and ends with :data:`TRUNCATION_MARKER`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence

import attrs

from firstmate.base.wakeinput import KEY_MAX, KINDS, PAYLOAD_MAX, TRUNCATION_MARKER, clean, validate
from firstmate.fast import appendpath, drainsteps, queueview
from firstmate.fast.wakeactor import (
    ACTOR_ENV,
    ACTORS,
    DEFAULT_LOCK_TIMEOUT,
    LOCK_TIMEOUT_ENV,
    UNCLAIMED_SQL,
    VALID_SQL,
    command_suffix,
    lock_timeout,
    resolve_actor,
)
from firstmate.store.database import SET_ASIDE_KEEP, Store, advance_seq
from firstmate.store.identity import current

#: Unusable rows quoted verbatim in a retirement report before the remainder is only counted.
REPORT_SHOWN = 20

@attrs.frozen
class WakeRow:
    seq: int
    at: float
    kind: str
    key: str
    payload: str

    def line(self) -> str:
        """The presentation line ``<seq>\\t<kind>\\t<key>\\t<payload>``."""
        return drainsteps.line(self.seq, self.kind, self.key, self.payload)

    def to_json(self) -> dict[str, object]:
        return {"seq": self.seq, "at": self.at, "kind": self.kind, "key": clean(self.key),
                "payload": clean(self.payload)}


# --- locking ---------------------------------------------------------------------------------


@contextlib.contextmanager
def locked(db: Store, *, timeout: float | None = None) -> Iterator[sqlite3.Connection]:
    """Hold the queue lock and a ``BEGIN IMMEDIATE`` transaction; commit on success.

    *timeout* None waits as long as it must; otherwise both waits share that many seconds and
    :class:`LockTimeout` is raised when they run out. Not re-entrant.
    """
    from firstmate.store.locks import FileLock

    lock = FileLock(db.home.lock_path("queue"), role="queue", home=db.home.root)
    started = time.monotonic()
    lock.acquire(timeout)
    try:
        left = None if timeout is None else max(0.5, timeout - (time.monotonic() - started))
        with db.transaction(timeout=left) as conn:
            yield conn
    finally:
        lock.release()


# --- append ----------------------------------------------------------------------------------


def append(db: Store, kind: str, key: str, payload: str, *, at: float | None = None) -> int:
    """Validate, then in one transaction publish downtime evidence and insert the row.

    Returns the new row's sequence number. Rings the watcher's doorbell after the commit.
    """
    kind, key, payload = validate(kind, key, payload)
    if os.name == "posix":  # (it rings the doorbell the moment the row is committed)
        path, lock, root = db.append_files()
        return appendpath.commit(db.connection(), path, lock, root, kind, key, payload, at=at,
                                 token=current().token())
    with locked(db) as conn:  # pragma: no cover - portalocker's lock, through FileLock
        seq = appendpath.insert(conn, kind, key, payload, at)
    from firstmate.fast import bell

    bell.ring(db.home)
    return seq


def append_locked(
    conn: sqlite3.Connection, kind: str, key: str, payload: str, *, at: float | None = None
) -> int:
    """:func:`append` for a caller already holding the queue lock and a transaction."""
    kind, key, payload = validate(kind, key, payload)
    return _insert(conn, kind, key, payload, at)


def _insert(conn: sqlite3.Connection, kind: str, key: str, payload: str, at: float | None) -> int:
    return appendpath.insert(conn, kind, key, payload, at)


# --- reading rows ----------------------------------------------------------------------------


@attrs.frozen
class _Bad:
    """An unusable row: its sequence and a one-line, TAB-separated quotation of its fields."""

    seq: int
    verbatim: str


Scanned = tuple[list[tuple[WakeRow, "str | None"]], list[_Bad]]


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


def _show(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return "NULL" if value is None else str(value)


def _quote(*fields: object) -> str:
    return "\t".join(clean(_show(v)) for v in fields)


_BLOBS = (
    "SELECT seq, at, CASE WHEN typeof(kind) = 'text' THEN CAST(kind AS BLOB) ELSE kind END,"
    " CASE WHEN typeof(key) = 'text' THEN CAST(key AS BLOB) ELSE key END,"
    " CASE WHEN typeof(payload) = 'text' THEN CAST(payload AS BLOB) ELSE payload END,"
    " typeof(kind), typeof(key), typeof(payload), claim FROM wakes"
)


def _parse(seq: object, at: object, kind: object, key: object, payload: object) -> WakeRow | None:
    row = queueview.usable(seq, at, kind, key, payload)
    return None if row is None else WakeRow(*row)


def scan(conn: sqlite3.Connection, where: str = "", params: Sequence[object] = ()) -> Scanned:
    """Rows in seq order: ``(row, claim)`` for usable rows, and the unusable ones quoted."""
    sql = f"SELECT seq, at, kind, key, payload, claim FROM wakes {('WHERE ' + where) if where else ''} ORDER BY seq"
    usable: list[tuple[WakeRow, str | None]] = []
    bad: list[_Bad] = []
    try:
        for seq, at, kind, key, payload, claim in conn.execute(sql, params):
            row = _parse(seq, at, kind, key, payload)
            if row is None:
                bad.append(_Bad(int(seq), _quote(at, seq, kind, key, payload)))
            else:
                usable.append((row, claim if claim in ACTORS else None))
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc).lower():
            raise
        return _scan_bytes(conn, where, params)  # some text is not UTF-8: the careful path
    return usable, bad


def _scan_bytes(conn: sqlite3.Connection, where: str, params: Sequence[object]) -> Scanned:
    sql = f"{_BLOBS} {('WHERE ' + where) if where else ''} ORDER BY seq"
    usable: list[tuple[WakeRow, str | None]] = []
    bad: list[_Bad] = []
    for seq, at, kind, key, payload, tkind, tkey, tpayload, claim in conn.execute(sql, params):
        fields = [kind if tkind == "text" else None, key if tkey == "text" else None,
                  payload if tpayload == "text" else None]
        row = _parse(seq, at, *(_text(f) for f in fields))
        if row is None:
            bad.append(_Bad(int(seq), _quote(at, seq, kind, key, payload)))
        else:
            usable.append((row, claim if claim in ACTORS else None))
    return usable, bad


def dedupe(rows: Iterable[WakeRow]) -> list[WakeRow]:
    """One row per (kind, key), in first-seen order, showing the last row; heartbeats collapse."""
    return drainsteps.dedupe((row.kind, row.key, row) for row in rows)


# --- unusable rows ---------------------------------------------------------------------------


def retire(conn: sqlite3.Connection, bad: Sequence[_Bad], who: str) -> tuple[list[str], bool]:
    """Delete unusable rows, reporting them verbatim (first 20, then a count). Never raises.

    Returns the report lines and whether the rows are gone.
    """
    if not bad:
        return [], True
    try:
        conn.execute("SAVEPOINT retire")
        conn.executemany("DELETE FROM wakes WHERE seq = ?", [(r.seq,) for r in bad])
        now = time.time()
        conn.executemany(
            "INSERT INTO set_aside (at, what, record) VALUES (?, 'wake-row', ?)",
            [(now, r.verbatim) for r in bad[-SET_ASIDE_KEEP:]],
        )
        conn.execute(
            "DELETE FROM set_aside WHERE id <= (SELECT max(id) FROM set_aside) - ?",
            (SET_ASIDE_KEEP,),
        )
        # Their numbers were seen: never hand them out again.
        advance_seq(conn, max(r.seq for r in bad))
        conn.execute("RELEASE retire")
    except sqlite3.Error as exc:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK TO retire")
            conn.execute("RELEASE retire")
        return [
            f"{who}: {len(bad)} unusable queue row(s) could not be retired ({exc}); "
            "continuing with the rows that remain usable"
        ], False
    lines = [f"{who}: retired {len(bad)} unusable queue row(s) that could not be presented or acknowledged:"]
    lines += [f"{who}:   {r.verbatim}" for r in bad[:REPORT_SHOWN]]
    if len(bad) > REPORT_SHOWN:
        lines.append(f"{who}:   ... {len(bad) - REPORT_SHOWN} further unusable row(s) not shown")
    return lines, True


def retire_unusable(conn: sqlite3.Connection, who: str = "wake drain") -> list[str]:
    """Main only: retire every unusable row (SQL-invalid or undecodable); the report lines."""
    return retire(conn, scan(conn)[1], who)[0]


def sql_unusable(conn: sqlite3.Connection) -> list[_Bad]:
    return scan(conn, f"NOT {VALID_SQL}")[1]


# --- queries (read-only; call inside Store.reading() or a transaction) ----------------------


def depth(conn: sqlite3.Connection, through: int | None = None) -> int:
    """Every queued row, usable or not (only those with a sequence up to *through* if given)."""
    if through is None:
        return queueview.depth(conn)
    return int(conn.execute("SELECT count(*) FROM wakes WHERE seq <= ?", (through,)).fetchone()[0])


unusable_count = queueview.unusable_count


def oldest(conn: sqlite3.Connection) -> WakeRow | None:
    usable, _ = scan(conn, f"{VALID_SQL} AND seq = (SELECT min(seq) FROM wakes WHERE {VALID_SQL})")
    return usable[0][0] if usable else None


def rows_after(conn: sqlite3.Connection, seq: int) -> list[WakeRow]:
    """Usable rows with a sequence above *seq*, ascending (for a watcher following appends)."""
    return [row for row, _ in scan(conn, "seq > ?", (int(seq),))[0]]


__all__ = [
    "ACTORS",
    "ACTOR_ENV",
    "DEFAULT_LOCK_TIMEOUT",
    "KEY_MAX",
    "KINDS",
    "LOCK_TIMEOUT_ENV",
    "PAYLOAD_MAX",
    "TRUNCATION_MARKER",
    "UNCLAIMED_SQL",
    "VALID_SQL",
    "WakeRow",
    "append",
    "append_locked",
    "clean",
    "command_suffix",
    "dedupe",
    "depth",
    "lock_timeout",
    "locked",
    "oldest",
    "resolve_actor",
    "retire_unusable",
    "rows_after",
    "unusable_count",
    "validate",
]
