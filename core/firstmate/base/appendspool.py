"""Group commit for concurrent appends: rows that wait for the queue lock ride one transaction.

Every durable append is one ``COMMIT`` with an fsync, serialised by the queue lock. When more
producers append at once than there are cores, each waits behind every other's fsync in turn
and throughput falls. So a producer that finds the queue lock taken does not simply queue up:

1. it writes its already-validated row to ``state/spool/<id>`` (a private file, renamed into
   place so it is never seen half-written; no fsync: until committed it is only a request);
2. it waits for the lock. Whoever holds the lock next commits *every* spooled row in its one
   transaction and, beside each, a marker ``kv['spool:<id>'] = seq``;
3. on getting the lock, a producer whose marker exists has nothing left to do: it removes its
   spool file and returns the sequence number. Otherwise it commits the spool itself.

Why markers in the database: they commit atomically with the rows, so a committer that dies
after its ``COMMIT`` can never lead a later one to insert the same spooled row twice (a spool
file with a marker is never inserted again). A marker whose spool file is gone has been read;
the next commit deletes it. A spool file whose producer died after its row was committed is
removed after :data:`ABANDONED_SECONDS`. A spool file that cannot be read as a row (damaged, or
planted) is set aside in the database, never inserted.

An uncontended append (the lock taken at once) writes no spool file; its only extra cost is one
``listdir`` that finds the spool empty or absent. Standard library only, like the rest of the
append path.
"""

from __future__ import annotations

import os
import time

from firstmate.base import dbconn
from firstmate.base.dbconn import sqlite3  # the C module alone (see dbconn)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate.base.safepaths import StrPath

SPOOL_DIR = "spool"
MARKER = "spool:"
#: Held exclusively by a producer while it commits; waiting producers wait on it shared.
GATE = ".gate"
#: A committed row's spool file older than this has lost its producer (killed while waiting).
ABANDONED_SECONDS = 600.0
_SEP = "\x00"  # cleaned text never holds a NUL (wakeinput.clean removes control characters)

#: One spooled row: (id, at, kind, key, payload).
Entry = tuple[str, float, str, str, str]


def spool_dir(state: StrPath) -> str:
    return os.path.join(os.fspath(state), SPOOL_DIR)


def write(state: StrPath, at: float, kind: str, key: str, payload: str) -> str:
    """Spool one validated row; returns its id. The directory is created 0700 on first use."""
    from firstmate.base.safepaths import make_private_dir, open_private

    folder = spool_dir(state)
    if not os.path.isdir(folder) or os.path.islink(folder):
        make_private_dir(folder)
    ident = f"{time.time_ns():020d}-{os.getpid()}-{os.urandom(4).hex()}"
    tmp = os.path.join(folder, f".{ident}.tmp")
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        os.write(fd, _SEP.join((repr(float(at)), kind, key, payload)).encode("utf-8"))
    finally:
        os.close(fd)
    os.rename(tmp, os.path.join(folder, ident))
    return ident


def _gate(state: StrPath) -> int:
    from firstmate.base.safepaths import open_private

    return open_private(os.path.join(spool_dir(state), GATE), os.O_RDWR | os.O_CREAT)


class committing:  # (lower case: used like a function, ``with committing(state):``)
    """Hold the gate exclusively around a commit (the caller holds the queue lock), so that
    producers waiting on the gate wake together when it is done. A plain class: contextlib
    costs the append path an import."""

    def __init__(self, state: StrPath) -> None:
        self.state = state
        self.fd = -1

    def __enter__(self) -> None:
        import fcntl

        folder = spool_dir(self.state)
        if not os.path.isdir(folder) or os.path.islink(folder):
            from firstmate.base.safepaths import make_private_dir

            make_private_dir(folder)
        self.fd = _gate(self.state)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # closing the last descriptor releases the flock


def wait(conn: sqlite3.Connection, state: StrPath, ident: str, queue_fd: int) -> int | None:
    """After spooling *ident*: its sequence number once a committer took it (None: the caller
    now holds the queue lock *queue_fd* exclusively and commits itself).

    Never spins: each round either sleeps in the kernel on the gate of a commit in progress (and
    then reads whether that commit took our row), or, with no producer committing (the queue
    is held by a drain, the watcher, …), waits for the queue lock itself.
    """
    import fcntl

    gate = _gate(state)
    try:
        while True:
            try:
                fcntl.flock(queue_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return None
            except BlockingIOError:
                pass
            try:
                fcntl.flock(gate, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # a producer is committing: wake with the others after it
                fcntl.flock(gate, fcntl.LOCK_SH)
                seq = committed(conn, ident)
                fcntl.flock(gate, fcntl.LOCK_UN)  # never held while waiting for the queue
                if seq is not None:
                    discard(state, ident)
                    return seq
                continue
            fcntl.flock(gate, fcntl.LOCK_UN)
            fcntl.flock(queue_fd, fcntl.LOCK_EX)
            return None
    finally:
        os.close(gate)


def discard(state: StrPath, ident: str) -> None:
    try:  # noqa: SIM105 - contextlib costs the append path an import
        os.unlink(os.path.join(spool_dir(state), ident))
    except FileNotFoundError:
        pass


def committed(conn: sqlite3.Connection, ident: str) -> int | None:
    """The sequence number a committer gave spooled row *ident*, if one did."""
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (MARKER + ident,)).fetchone()
    try:
        return int(row[0]) if row else None
    except (TypeError, ValueError):
        return None


def _parse(data: bytes) -> tuple[float, str, str, str] | None:
    from firstmate.base.errors import UsageError
    from firstmate.base.wakeinput import validate

    try:
        at, kind, key, payload = data.decode("utf-8").split(_SEP)
        if validate(kind, key, payload) != (kind, key, payload):
            return None  # a producer spools rows it validated: this one was not written by one
        return float(at), kind, key, payload
    except (ValueError, UsageError):  # wrong field count, not UTF-8, not a number, not a row
        return None


def collect(conn: sqlite3.Connection, state: StrPath) -> list[Entry]:
    """Inside the write transaction: the spooled rows still to insert, oldest first.

    Also tidies up: markers whose spool file is gone are deleted, abandoned files removed, and
    files that are not rows set aside.
    """
    from firstmate.base.safepaths import refuse_symlink

    folder = spool_dir(state)
    refuse_symlink(folder)  # a planted link would feed another directory's files in as rows
    try:
        names = [n for n in os.listdir(folder) if not n.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return []
    names.sort()
    present = set(names)
    marked = {str(k)[len(MARKER):] for (k,) in conn.execute(
        "SELECT key FROM kv WHERE key >= ? AND key < ?", (MARKER, "spool;"))}
    gone = marked - present
    if gone:
        conn.executemany("DELETE FROM kv WHERE key = ?", [(MARKER + g,) for g in gone])
    now = time.time()
    out: list[Entry] = []
    for name in names:
        path = os.path.join(folder, name)
        if name in marked:
            try:
                if now - os.lstat(path).st_mtime > ABANDONED_SECONDS:
                    os.unlink(path)
                    conn.execute("DELETE FROM kv WHERE key = ?", (MARKER + name,))
            except FileNotFoundError:
                pass
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        except OSError:  # a symlink or worse: never followed, never inserted
            fields = None
            data = b""
        else:
            try:
                data = os.read(fd, 1 << 20)
            finally:
                os.close(fd)
            fields = _parse(data)
        if fields is None:
            dbconn.set_aside(conn, "spooled row",
                             f"{name}\t{data[:500].decode('utf-8', 'replace')}")
            try:  # noqa: SIM105 - contextlib costs the append path an import
                os.unlink(path)
            except OSError:
                pass
            continue
        out.append((name, *fields))
    return out


def mark(conn: sqlite3.Connection, ident: str, seq: int) -> None:
    conn.execute("INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                 "value = excluded.value", (MARKER + ident, str(seq)))


__all__ = ["ABANDONED_SECONDS", "Entry", "collect", "committed", "committing", "discard", "mark",
           "wait", "write"]
