"""The database connection rules and the small row helpers, as plain functions over a connection.

The attrs-free core of :mod:`firstmate.store.database` (which re-exports these and adds the migrations and
the :class:`~firstmate.store.database.Store` service). ``fm wake append`` opens its database through
:func:`open_connection` without importing the store; when the schema is not the current one it
hands over to the store, which migrates.
"""

from __future__ import annotations

import os
import stat
import time

try:
    # The C module alone: the sqlite3 package on top of it adds datetime adapters this code
    # never uses, at about a quarter of an interpreter's start on every `fm wake append`.
    import _sqlite3 as sqlite3
except ImportError:  # pragma: no cover - an interpreter without CPython's private module
    import sqlite3  # type: ignore[no-redef]

from firstmate.base.safepaths import open_private, refuse_symlink, state_error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate.base.errors import StateError
    from firstmate.base.safepaths import StrPath

#: Milliseconds one ``BEGIN IMMEDIATE`` waits inside SQLite before we look again.
BUSY_SLICE_MS = 1000
#: Busy timeout for everything else on a connection (opening, WAL set-up, reads), in ms.
BUSY_TIMEOUT_MS = 30_000
#: How many set-aside records are kept (the newest).
SET_ASIDE_KEEP = 256
#: ``PRAGMA user_version`` of a database with every migration applied; the store checks that its
#: ``MIGRATIONS`` end here (add one there, bump this).
SCHEMA_VERSION = 4

#: SQLite's words for a database whose tables are not ours (another program's, or cut short).
_FOREIGN_MARKERS = ("no such table", "no such column")


def not_ours(path: StrPath, why: str) -> StateError:
    return state_error(
        f"{os.fspath(path)} is not a Firstmate database ({why}); move it aside and run fm again"
    )


def translate(path: StrPath, exc: BaseException) -> StateError:
    """The one-line StateError for an SQLite failure that is about the file, not our code. It
    never says more than is known: a failure that reads as damage is checked before the user
    is told to move the file aside (:func:`firstmate.base.dbfault.read_failed`). (A failed
    ``COMMIT`` is :func:`commit`'s: whether it wrote anything is settled there.)"""
    text = str(exc) or type(exc).__name__
    lowered = text.lower()
    if any(marker in lowered for marker in _FOREIGN_MARKERS):
        return not_ours(path, text)
    if not isinstance(exc, sqlite3.OperationalError):
        from firstmate.base import dbfault  # (on failure only: the append path never pays)

        if dbfault.damage_suspected(exc):
            return dbfault.read_failed(path, exc, not_ours(path, text))
        return not_ours(path, text)
    where = os.fspath(path)
    if "disk is full" in lowered or getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL":
        return state_error(f"no space left to write {where} ({text}); free space on its filesystem and retry")
    if "readonly" in lowered or "read-only" in lowered:
        return state_error(f"cannot write {where} ({text}); make it and state/ writable by you")
    if "unable to open" in lowered:
        return state_error(f"cannot open {where} ({text}); check that state/ exists and is writable")
    if "disk i/o" in lowered:
        return state_error(f"a disk I/O error on {where} ({text}); what it interrupted was not "
                           "written: check the disk (dmesg) and retry")
    from firstmate.base import dbfault

    if dbfault.damage_suspected(exc):
        return dbfault.read_failed(path, exc, not_ours(path, text))
    return state_error(f"{where}: {text}; retry, and move the file aside if this persists")


def about_the_file(exc: BaseException) -> bool:
    # OperationalError and bare DatabaseError describe the file (corrupt, unreadable, locked);
    # IntegrityError / ProgrammingError are bugs in our SQL and must surface as such.
    return isinstance(exc, sqlite3.OperationalError) or type(exc) is sqlite3.DatabaseError


def is_busy(exc: sqlite3.Error) -> bool:
    name = str(getattr(exc, "sqlite_errorname", ""))
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return True
    text = str(exc).lower()
    return "database is locked" in text or "database is busy" in text


# --- transactions ---------------------------------------------------------------------------


def begin(conn: sqlite3.Connection, path: StrPath, timeout: float | None) -> None:
    """Take the database write lock (``BEGIN IMMEDIATE``), waiting as *timeout* allows."""
    # Waiting as long as it takes needs no slices of our own: the connection's busy timeout
    # waits first, and only a wait that outlasts it goes on in slices (two statements fewer on
    # every uncontended write).
    if timeout is None and _begin_once(conn, path) is None:
        return
    try:
        _begin(conn, path, timeout)
    finally:
        # The wait used short busy slices; everything after it gets the ordinary timeout.
        try:  # noqa: SIM105 - contextlib costs the fast path an import
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        except sqlite3.Error:
            pass


def _begin_once(conn: sqlite3.Connection, path: StrPath) -> sqlite3.OperationalError | None:
    """One ``BEGIN IMMEDIATE``: None once it began, the error when another writer held the lock
    throughout the connection's busy timeout (any other failure is raised as its StateError)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if not is_busy(exc):
            raise translate(path, exc) from exc
        return exc
    except sqlite3.DatabaseError as exc:
        raise translate(path, exc) from exc
    return None


def _begin(conn: sqlite3.Connection, path: StrPath, timeout: float | None) -> None:
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        slice_ms = BUSY_SLICE_MS if left is None else max(0, min(BUSY_SLICE_MS, int(left * 1000)))
        conn.execute(f"PRAGMA busy_timeout = {slice_ms}")
        busy = _begin_once(conn, path)
        if busy is None:
            return
        if deadline is not None and time.monotonic() >= deadline:
            from firstmate.base.errors import LockTimeout

            waited = time.monotonic() - started
            raise LockTimeout(
                f"{os.fspath(path)} stayed locked by another writer for {waited:.1f}s; retry",
                holder_pid=None, waited=waited,
            ) from busy


def start(conn: sqlite3.Connection, path: StrPath, timeout: float | None = None) -> None:
    """Open a write transaction (:func:`begin`) on a connection that is not already in one."""
    if conn.in_transaction:
        raise RuntimeError("Store.transaction() does not nest")
    begin(conn, path, timeout)


def abort(conn: sqlite3.Connection, path: StrPath, exc: BaseException) -> None:
    """Roll back after the body of a transaction raised *exc*; raise its StateError when the
    failure is about the file (the caller re-raises *exc* otherwise)."""
    try:  # noqa: SIM105
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass
    if about_the_file(exc):
        raise translate(path, exc) from exc


def end_read(conn: sqlite3.Connection) -> None:
    """End a read transaction, if one is open (nothing was written: the rollback only ends it)."""
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


def commit(conn: sqlite3.Connection, path: StrPath) -> None:
    """``COMMIT``, or roll back and raise the StateError naming the file: a
    :class:`~firstmate.base.dbfault.CommitFailed` that says whether anything was written
    (settled first, :func:`firstmate.base.dbfault.commit_failed`), or, when the database was
    busy, the plain error (nothing was written)."""
    try:
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        try:  # noqa: SIM105
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        if is_busy(exc):
            raise translate(path, exc) from exc
        from firstmate.base import dbfault

        raise dbfault.commit_failed(conn, path, exc) from exc


# --- opening --------------------------------------------------------------------------------


def check_paths(state: StrPath, db: StrPath) -> None:
    """``state/`` exists and is no symlink; neither is the database or any of its companions."""
    if not os.path.isdir(state):
        refuse_symlink(state)
        raise state_error(
            f"{os.fspath(state)} does not exist; run fm from a prepared home or set FM_HOME"
        )
    refuse_symlink(state)
    for suffix in ("", "-wal", "-shm", "-journal"):
        refuse_symlink(f"{os.fspath(db)}{suffix}")


def prepare_file(path: StrPath) -> None:
    """Create the database file 0600 without following a symlink; tighten a looser mode."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        os.close(open_private(path, os.O_RDWR | os.O_CREAT))
        return
    if stat.S_ISDIR(st.st_mode):
        raise not_ours(path, "it is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise not_ours(path, "it is not a regular file")
    if st.st_size == 0:
        # fm creates the file whole (store._create): an empty one was truncated or damaged, and
        # starting it afresh would reuse sequence numbers already handed out.
        where = os.fspath(path)
        raise state_error(
            f"{where} is empty (truncated or damaged), so its queue and sequence counter are "
            f"lost; keep it for inspection and start a fresh queue: mv {where} {where}.empty"
        )
    if st.st_uid != os.geteuid():
        raise state_error(f"{os.fspath(path)} is owned by uid {st.st_uid}, not by you; fm only "
                          "uses a database you own: move it aside and run fm again")
    if st.st_mode & 0o077:
        try:  # noqa: SIM105
            os.chmod(path, 0o600)
        except OSError:
            pass
    if not os.access(path, os.R_OK | os.W_OK):
        raise state_error(f"cannot read and write {os.fspath(path)}; make it owned by you with mode 0600")


def open_connection(path: StrPath) -> sqlite3.Connection:
    """Connect to a prepared file: refuse a foreign database, then WAL, ``synchronous=FULL``
    and foreign keys. Migrating is the caller's (:mod:`firstmate.store.database`) job."""
    try:
        conn = sqlite3.connect(
            os.fspath(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
            check_same_thread=False,
        )
    except sqlite3.Error as exc:
        raise translate(path, exc) from exc
    try:
        # Refuse another program's database before anything writes to it: switching its journal
        # to WAL would already rewrite its header.
        if schema_version(conn) == 0 and has_foreign_tables(conn):
            raise not_ours(path, "an SQLite database of another program")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode is None or str(mode[0]).lower() != "wal":
            raise state_error(
                f"cannot put {os.fspath(path)} in WAL mode (got {mode}); check the filesystem supports it"
            )
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.Error as exc:
        conn.close()
        raise translate(path, exc) from exc
    except BaseException:
        conn.close()
        raise
    return conn


def schema_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0]) if row else 0


def has_foreign_tables(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE type IN ('table', 'view') "
        "AND name NOT LIKE 'sqlite_%'"
    ).fetchone()
    return bool(row and row[0])


# --- small shared helpers (all called inside a transaction) ---------------------------------


def next_seq(conn: sqlite3.Connection) -> int:
    """Allocate the next wake sequence number: past the counter *and* every queued row.

    Numbering past the queued rows means a lost or damaged counter can never hand out a number an
    outstanding acknowledgement already covers; the counter means numbers are never reused after
    rows are deleted.
    """
    return next_seqs(conn, 1)


def next_seqs(conn: sqlite3.Connection, count: int) -> int:
    """Allocate *count* consecutive sequence numbers (as :func:`next_seq`); returns the first."""
    row = conn.execute(
        "SELECT (SELECT CASE WHEN typeof(value) = 'integer' THEN value ELSE 0 END "
        "        FROM counters WHERE name = 'wake_seq'), "
        "       (SELECT coalesce(max(seq), 0) FROM wakes)"
    ).fetchone()
    counter, top = (int(row[0]) if row and row[0] is not None else 0), int(row[1] if row else 0)
    seq = max(counter, top) + 1
    if seq + count - 1 > 2**63 - 1:  # SQLite's INTEGER: a sequence is never reused, so none is left
        from firstmate.base.errors import StateError

        raise StateError("the wake sequence is exhausted (every number up to 2^63-1 is used); "
                         "move this home's state aside and start a new one")
    set_seq(conn, seq + count - 1)
    return seq


def set_seq(conn: sqlite3.Connection, value: int) -> None:
    """Store *value* as the sequence counter (the caller holds the transaction)."""
    conn.execute(
        "INSERT INTO counters (name, value) VALUES ('wake_seq', ?) "
        "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        (value,),
    )


def last_seq(conn: sqlite3.Connection) -> int:
    """The highest sequence number ever allocated (or queued, if the counter was lost)."""
    row = conn.execute(
        "SELECT max(coalesce((SELECT CASE WHEN typeof(value) = 'integer' THEN value ELSE 0 END "
        "                     FROM counters WHERE name = 'wake_seq'), 0), "
        "           coalesce((SELECT max(seq) FROM wakes), 0))"
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def kv_get(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def kv_set(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def set_aside(conn: sqlite3.Connection, what: str, record: str) -> None:
    """Keep a record taken out of service for inspection (bounded to the newest few hundred)."""
    conn.execute(
        "INSERT INTO set_aside (at, what, record) VALUES (?, ?, ?)", (time.time(), what, record)
    )
    conn.execute(
        "DELETE FROM set_aside WHERE id <= (SELECT max(id) FROM set_aside) - ?", (SET_ASIDE_KEEP,)
    )


__all__ = [
    "BUSY_SLICE_MS",
    "BUSY_TIMEOUT_MS",
    "SCHEMA_VERSION",
    "SET_ASIDE_KEEP",
    "abort",
    "about_the_file",
    "begin",
    "check_paths",
    "commit",
    "end_read",
    "has_foreign_tables",
    "is_busy",
    "kv_get",
    "kv_set",
    "last_seq",
    "next_seq",
    "next_seqs",
    "not_ours",
    "open_connection",
    "prepare_file",
    "schema_version",
    "set_aside",
    "set_seq",
    "sqlite3",
    "start",
    "translate",
]
