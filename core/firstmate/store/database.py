"""The home's one SQLite database, ``state/firstmate.db``: connection, schema and transactions.

Everything durable and transactional lives here: wake rows and their sequence counter, per-actor
claims, the branch grant, the recovery episode, the delivery ledger, small facts (``kv``) and
records set aside for inspection. Process-lifetime facts (who holds the watcher singleton, the
queue writer lock) are kernel locks instead; see :mod:`firstmate.store.locks`.

Connection rules (implemented as plain functions in :mod:`firstmate.base.dbconn`, re-exported here)
    The database file is created 0600 and is never opened through a symlink (nor are its ``-wal``
    and ``-shm`` companions). Every connection runs in WAL mode with ``synchronous=FULL`` (an
    append or acknowledgement that returned is on disk), a busy timeout and foreign keys on.
    Python's implicit transactions are off; :meth:`Store.transaction` issues ``BEGIN IMMEDIATE``
    so a writer takes the write lock before it reads what it will change.

A file that is not a Firstmate database (corrupt, another program's SQLite file, not SQLite at
all) is never deleted or rewritten: opening it raises :class:`~firstmate.base.errors.StateError`
naming the file and asking the user to move it aside.

Extending the schema
    :data:`MIGRATIONS` is an ordered, append-only list (bump ``dbconn.SCHEMA_VERSION`` with it:
    the ``fm wake append`` fast path hands any other version to the store). ``PRAGMA user_version`` records how many
    of them a database has applied. To change the schema, append a new :class:`Migration` to the
    end of the tuple (a name and the SQL statements, or a callable taking the connection) and
    describe the new tables in ``docs/state.md``. Never edit, reorder or remove a migration that
    has shipped: databases in the field have already applied it. Each pending migration runs in
    its own ``BEGIN IMMEDIATE`` transaction together with the ``user_version`` bump, so a crash
    leaves the database at the old version or the new one, never in between, and concurrent
    openers never apply the same migration twice. A database whose ``user_version`` is higher than
    this code knows was written by a newer Firstmate and is refused rather than guessed at.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import attrs

from firstmate.base.dbconn import (
    BUSY_SLICE_MS,
    BUSY_TIMEOUT_MS,
    SCHEMA_VERSION,
    SET_ASIDE_KEEP,
    abort,
    about_the_file,
    begin,
    check_paths,
    commit,
    end_read,
    has_foreign_tables,
    kv_get,
    kv_set,
    last_seq,
    next_seq,
    not_ours,
    open_connection,
    prepare_file,
    schema_version,
    set_aside,
    set_seq,
    start,
    translate,
)
from firstmate.base.errors import StateError
from firstmate.store.home import Home

#: How many delivery-ledger rows are kept (the newest).
DELIVERIES_KEEP = 64

Apply = Callable[[sqlite3.Connection], None]


@attrs.frozen
class Migration:
    """One schema step: *name* for humans, *apply* runs inside the migration transaction."""

    name: str
    apply: Apply


def sql(*statements: str) -> Apply:
    """An :data:`Apply` running *statements* one by one (``executescript`` would COMMIT early)."""

    def run(conn: sqlite3.Connection) -> None:
        for statement in statements:
            conn.execute(statement)

    return run


_V1 = sql(
    # Wake rows. ``seq`` comes from counters('wake_seq'), never from rowid allocation, so it is
    # never reused even after the table empties. Columns are deliberately untyped beyond the seq
    # (no declared type = no affinity, so a key like "0123" stays text):
    # rows that fail validation (written by hand or by older code) must be representable so a
    # main drain can retire them with a verbatim report instead of the database refusing them.
    # ``claim`` is NULL (unowned), 'main' (presented to or claimed by main), 'branch'
    # (reserved by the supervision branch grant when it was published) or 'returned' (a grant
    # gave it back unconsumed: unowned, but owed a presentation before main may acknowledge it).
    """CREATE TABLE wakes (
        seq INTEGER PRIMARY KEY,
        at,
        kind,
        key,
        payload,
        claim TEXT
    )""",
    "CREATE INDEX wakes_by_claim ON wakes (claim, seq)",
    "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID",
    "INSERT INTO counters (name, value) VALUES ('wake_seq', 0)",
    # The recovery episode: at most one row. Untyped for the same reason as wakes: a hand-edited
    # or damaged row is read as *invalid*, set aside, and replaced by a fresh generation.
    """CREATE TABLE episode (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        status,
        kind,
        generation,
        announced_seq INTEGER,
        updated_at REAL
    )""",
    # The supervision-branch grant owner (one at most). Its reserved rows are wakes.claim='branch'.
    """CREATE TABLE branch_grant (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        owner_pid INTEGER NOT NULL,
        identity TEXT NOT NULL,
        generation TEXT NOT NULL,
        activated_at REAL NOT NULL,
        published_at REAL
    )""",
    # Terminal-delivery ledger: what a watcher printed before it released its singleton.
    """CREATE TABLE deliveries (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at REAL NOT NULL,
        watcher_pid INTEGER NOT NULL,
        identity TEXT NOT NULL,
        reason TEXT NOT NULL
    )""",
    "CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    # Records taken out of service (an invalid episode, unusable wake rows), kept for inspection.
    """CREATE TABLE set_aside (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at REAL NOT NULL,
        what TEXT NOT NULL,
        record TEXT NOT NULL
    )""",
)

_V2 = sql(
    # What `fm migrate --from-legacy` imported, so a second import adds nothing twice.
    """CREATE TABLE legacy_imports (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at REAL NOT NULL,
        source TEXT NOT NULL,
        imported INTEGER NOT NULL,
        retired INTEGER NOT NULL,
        skipped INTEGER NOT NULL,
        episode TEXT
    )""",
    """CREATE TABLE legacy_lines (
        digest TEXT PRIMARY KEY,
        seq INTEGER,
        outcome TEXT NOT NULL
    ) WITHOUT ROWID""",
)

#: The schema, oldest first. Append only (see the module docstring).
MIGRATIONS: tuple[Migration, ...] = (
    Migration("wake queue, sequence, episode, grant, deliveries, kv, set-aside", _V1),
    Migration("legacy import ledger", _V2),
    # Which arm started or attached to which watcher, and whose successor it was (fm arm).
    Migration("watcher cycle links", sql(
        """CREATE TABLE cycle_links (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at REAL NOT NULL,
            arm_pid INTEGER NOT NULL,
            arm_identity TEXT NOT NULL,
            origin TEXT NOT NULL,
            watcher_pid INTEGER NOT NULL,
            watcher_identity TEXT NOT NULL,
            predecessor_pid INTEGER,
            predecessor_identity TEXT,
            predecessor_arm_pid INTEGER
        )""",
        "CREATE INDEX cycle_links_by_arm ON cycle_links (arm_pid, origin, id)",
    )),
    # Remote crews' events the fleet relay committed (firstmate.fleet.inbox): the newest of each
    # kind per host, outbox and crew (every older id is a duplicate), the write-ahead intents of
    # lines being appended to the crews' files, and what each host sent or had refused.
    Migration("fleet relay inbox", sql(
        """CREATE TABLE fleet_seen (
            host TEXT NOT NULL,
            epoch TEXT NOT NULL,
            crew TEXT NOT NULL,
            kind TEXT NOT NULL,
            n INTEGER NOT NULL,
            stream_seq INTEGER NOT NULL,
            at REAL NOT NULL,
            PRIMARY KEY (host, epoch, crew, kind)
        ) WITHOUT ROWID""",
        """CREATE TABLE fleet_inbox (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            msg_id TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            suffix TEXT NOT NULL,
            start INTEGER NOT NULL,
            data BLOB NOT NULL
        )""",
        """CREATE TABLE fleet_hosts (
            host TEXT PRIMARY KEY,
            seen_at REAL,
            events INTEGER NOT NULL DEFAULT 0,
            refused INTEGER NOT NULL DEFAULT 0,
            last_refusal TEXT
        ) WITHOUT ROWID""",
    )),
)

if len(MIGRATIONS) != SCHEMA_VERSION:  # pragma: no cover - caught by any test run
    raise RuntimeError("store.MIGRATIONS and dbconn.SCHEMA_VERSION disagree; bump SCHEMA_VERSION")


@attrs.define(eq=False)
class Store:
    """An open connection to one home's database (reopened transparently after a fork)."""

    home: Home
    _conn: sqlite3.Connection | None = None
    _pid: int = -1
    _files: tuple[str, str, str] | None = None

    @property
    def path(self) -> Path:
        return self.home.db

    def append_files(self) -> tuple[str, str, str]:
        """``(database, queue lock, home root)`` as strings, made once: an append needs them
        every time, and building them as paths costs it more than some of its system calls."""
        if self._files is None:
            home = self.home
            self._files = (os.fspath(home.db), os.fspath(home.lock_path("queue")),
                           os.fspath(home.root))
        return self._files

    def connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            # A connection inherited across fork() must never be used by the child.
            self._conn = _connect(self.home)
            self._pid = os.getpid()
        return self._conn

    @contextlib.contextmanager
    def transaction(self, *, timeout: float | None = None) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``; rolled back if the body raises.

        With *timeout* None the write lock is waited for as long as it takes; otherwise
        :class:`LockTimeout` (holder unknown) is raised after *timeout* seconds.
        """
        conn = self.connection()
        start(conn, self.path, timeout)
        try:
            yield conn
        except BaseException as exc:
            abort(conn, self.path, exc)
            raise
        commit(conn, self.path)

    @contextlib.contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """A consistent read snapshot (a deferred transaction, never taking the write lock)."""
        conn = self.connection()
        if conn.in_transaction:
            raise RuntimeError("Store.reading() does not nest")
        try:
            conn.execute("BEGIN DEFERRED")
            yield conn
        except BaseException as exc:
            if about_the_file(exc):
                raise translate(self.path, exc) from exc
            raise
        finally:
            end_read(conn)

    def close(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None


def open_store(home: Home) -> Store:
    """A :class:`Store` for *home*, connected (and migrated) now so errors surface here."""
    store = Store(home)
    store.connection()
    return store


def _connect(home: Home) -> sqlite3.Connection:
    path = home.db
    check_paths(home.state, path)
    if not os.path.lexists(path):
        _create(home)
    prepare_file(path)
    conn = open_connection(path)
    try:
        _migrate(conn, path)
    except sqlite3.Error as exc:
        conn.close()
        raise translate(path, exc) from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _create(home: Home) -> None:
    """Create the database whole: built under a private name, then linked into place, so the
    path never names a half-made file (an empty one there is damage, refused by
    :func:`~firstmate.base.dbconn.prepare_file`). A concurrent creator that links first wins."""
    tmp = home.state / f".{home.db.name}.new.{os.getpid()}"
    try:
        for leftover in _companions(tmp):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
        prepare_file(tmp)
        conn = open_connection(tmp)
        try:
            _migrate(conn, tmp)
        finally:
            conn.close()
        with contextlib.suppress(FileExistsError):
            os.link(tmp, home.db)
    except OSError as exc:
        raise StateError(f"cannot create {home.db}: {exc.strerror}; check that {home.state} is "
                         "writable and its filesystem has space") from exc
    finally:
        for leftover in _companions(tmp):
            with contextlib.suppress(OSError):
                os.unlink(leftover)


def _companions(path: Path) -> list[str]:
    return [f"{path}{suffix}" for suffix in ("", "-wal", "-shm", "-journal")]


def _migrate(conn: sqlite3.Connection, path: Path, migrations: Sequence[Migration] = MIGRATIONS) -> None:
    latest = len(migrations)
    version = schema_version(conn)
    if version == latest:
        return
    if version > latest:
        raise StateError(
            f"{path} was written by a newer Firstmate (schema {version}, this fm knows {latest}); "
            "upgrade fm, or move the file aside and run fm again"
        )
    while True:
        begin(conn, path, None)
        try:
            version = schema_version(conn)
            if version == 0 and has_foreign_tables(conn):
                raise not_ours(path, "an SQLite database of another program")
            if version >= latest:
                conn.execute("ROLLBACK")
                return
            migrations[version].apply(conn)
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise


# --- small shared helpers (all called inside a transaction) ---------------------------------


def advance_seq(conn: sqlite3.Connection, floor: int) -> int:
    """Make sure the counter is at least *floor*; returns the counter afterwards."""
    value = max(last_seq(conn), floor)
    set_seq(conn, value)
    return value


def max_queued_seq(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT coalesce(max(seq), 0) FROM wakes").fetchone()
    return int(row[0]) if row else 0


__all__ = [
    "BUSY_SLICE_MS",
    "BUSY_TIMEOUT_MS",
    "DELIVERIES_KEEP",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SET_ASIDE_KEEP",
    "Migration",
    "Store",
    "advance_seq",
    "begin",
    "kv_get",
    "kv_set",
    "last_seq",
    "max_queued_seq",
    "next_seq",
    "not_ours",
    "open_store",
    "schema_version",
    "set_aside",
    "sql",
    "translate",
]
