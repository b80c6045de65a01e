"""Group commit for concurrent appends: rows appended at once ride one transaction.

Every durable append is one ``COMMIT`` with an fsync, serialised by the queue lock. When more
producers append at once than there are cores, each waits behind every other's fsync in turn
and throughput falls. So producers meet first at the spool's gate, ``state/spool/.gate``:

1. the producer that takes the gate (without waiting) *leads*: it announces its commit (a fresh
   ``state/spool/.commit``, held exclusively until the commit ends), takes the queue lock and
   commits its row and *every* spooled row in one transaction, with beside each spooled row a
   marker ``kv['spool:<id>'] = seq``; after the ``COMMIT`` it writes ``<id> <seq>`` lines for
   them into the announcement, then lets go of the gate and the announcement;
2. a producer that finds the gate taken *follows*: it writes its already-validated row to
   ``state/spool/<id>`` (a private file, renamed into place so it is never seen half-written; no
   fsync: until committed it is only a request) and sleeps on the announcement (shared). Woken
   by the end of the commit, it reads its number there; if its row came too late for that
   commit it tries to lead the next one, or sleeps on the next announcement.

Followers never wait for the queue lock, nor for a lock a next leader could take again before
they run: each announcement is a new file, locked once. An announcement also repeats the
numbers of rows an earlier commit took whose producers have not read them yet, so a follower
that slept through the commit of its row learns its number from the next. A follower that
comes to lead checks its marker first (a leader killed between its ``COMMIT`` and its list).

Why markers in the database: they commit atomically with the rows, so a leader that dies after
its ``COMMIT`` can never lead a later one to insert the same spooled row twice (a spool file
with a marker is never inserted again). A marker whose spool file is gone has been read; the
next commit deletes it. A spool file whose producer died after its row was committed is removed
after :data:`ABANDONED_SECONDS`. A spool file that cannot be read as a row (damaged, or planted)
is set aside in the database, never inserted.

An uncontended append (the gate taken at once) writes no spool file; its extra cost is the gate,
the announcement (a create and a rename) and one ``listdir``. Standard library only, like the
rest of the append path.
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
#: Held exclusively by the producer that leads a commit (it is taken without waiting).
GATE = ".gate"
#: The commit in progress, renamed into place fresh by each leader and held exclusively until
#: its commit ends; followers sleep on it shared.
NOTE = ".commit"
#: How often a follower yields its CPU to a leader that took the gate but has not announced.
EARLY_YIELDS = 50
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


def open_gate(state: StrPath) -> int:
    """A descriptor on ``state/spool/.gate`` (the spool directory is created 0700 if missing)."""
    from firstmate.base.safepaths import make_private_dir, open_private

    folder = spool_dir(state)
    if not os.path.isdir(folder) or os.path.islink(folder):
        make_private_dir(folder)
    return open_private(os.path.join(folder, GATE), os.O_RDWR | os.O_CREAT)


def lead(gate: int) -> bool:
    """Try to become the committing producer: the gate exclusively, without waiting."""
    import fcntl

    try:
        fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def announce(state: StrPath) -> int:
    """For a leader (it holds the gate): a fresh ``state/spool/.commit`` held exclusively until
    the caller closes the returned descriptor, after its commit. Followers sleep on it shared.

    A fresh file each commit, never locked again once released: followers woken by its release
    always get it, however soon the next leader starts (on one shared lock file they could be
    shut out again by each next commit while waiting for a CPU, for seconds under load).
    """
    import fcntl

    from firstmate.base.safepaths import open_private

    folder = spool_dir(state)
    tmp = os.path.join(folder, f"{NOTE}-{os.getpid()}-{os.urandom(4).hex()}.tmp")
    fd = open_private(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(tmp, os.path.join(folder, NOTE))
    except BaseException:
        os.close(fd)
        try:  # noqa: SIM105 - contextlib costs the append path an import
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return fd


class committing:  # (lower case: used like a function, ``with committing(state):``)
    """Lead a commit as a producer does: the gate exclusively (waiting for it) and a fresh
    announcement; followers wake together when it ends. A plain class: contextlib costs the
    append path an import."""

    def __init__(self, state: StrPath) -> None:
        self.state = state
        self.fd = self.note = -1

    def __enter__(self) -> None:
        import fcntl

        self.fd = open_gate(self.state)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.note = announce(self.state)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # the gate first: a woken follower may lead at once
        os.close(self.note)


def publish(note: int, served: list[tuple[str, int]]) -> None:
    """After the commit: write ``<id> <seq>`` lines for the rows it took into the announcement,
    so that followers woken by its release read their numbers without opening the database.
    One write; losing it (a leader killed first) costs followers only a look at their markers."""
    if served:
        os.write(note, "".join(f"{ident} {seq}\n" for ident, seq in served).encode())


def _sleep_on_commit(state: StrPath, ident: str) -> tuple[bool, int | None]:
    """Sleep until the announced commit ends: (whether one was in progress, the sequence number
    it gave *ident* if it says so)."""
    import fcntl

    try:
        fd = os.open(os.path.join(spool_dir(state), NOTE), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False, None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            slept = False
        except BlockingIOError:
            fcntl.flock(fd, fcntl.LOCK_SH)
            slept = True
        # Shared: no leader writes it any more (each announces in a file of its own).
        size = os.fstat(fd).st_size
        data = b"\n" + os.read(fd, size) if size else b""
    finally:
        os.close(fd)
    at = data.find(f"\n{ident} ".encode())
    if at < 0:
        return slept, None
    end = data.find(b"\n", at + 1)
    try:
        return slept, int(data[at + len(ident) + 2:end if end >= 0 else len(data)])
    except ValueError:
        return slept, None


def follow(state: StrPath, ident: str, gate: int) -> int | None:
    """After spooling *ident* (the gate was taken): its sequence number once a leader committed
    it, or None once the caller holds *gate* exclusively: it then leads (announces, reads its
    row's marker: a leader may have taken the row since it looked, or been killed between its
    commit and its announcement's list; then takes the queue lock and commits every spooled
    row).

    Each round sleeps in the kernel on the announcement of the commit in progress, then reads
    which rows it took. Nobody waits for the queue lock here: a follower whose row was committed
    learns it from the end of the commit that took it, not from a turn at a lock. The only
    other wait is the instant between a leader taking the gate and announcing its commit: a
    follower yields its CPU a few times, then waits for the gate itself.
    """
    import fcntl

    early = 0
    while True:
        slept, seq = _sleep_on_commit(state, ident)
        if seq is not None:
            discard(state, ident)
            return seq
        if lead(gate):
            return None
        if slept:
            early = 0
            continue  # another leader took over: its commit takes our row
        early += 1
        if early <= EARLY_YIELDS:
            os.sched_yield()  # a leader that has not announced yet: let it run
            continue
        fcntl.flock(gate, fcntl.LOCK_EX)  # it stays unannounced (stopped?): queue for the gate
        return None


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


def collect(conn: sqlite3.Connection, state: StrPath,
            already: list[tuple[str, int]] | None = None) -> list[Entry]:
    """Inside the write transaction: the spooled rows still to insert, oldest first. Each
    spooled row a commit already took, still waiting for its producer to read its number, is
    added to *already* as ``(id, seq)``: the leader's announcement repeats it, so a follower
    that slept through the commit which took its row learns its number from the next one.

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
    marked = {str(k)[len(MARKER):]: v for (k, v) in conn.execute(
        "SELECT key, value FROM kv WHERE key >= ? AND key < ?", (MARKER, "spool;"))}
    gone = marked.keys() - present
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
                elif already is not None:
                    already.append((name, int(marked[name])))
            except (FileNotFoundError, TypeError, ValueError):
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
                # As much as is there (a row is a few kilobytes at most): a fixed large buffer
                # would cost an allocation the size of it for every row.
                data = os.read(fd, min(os.fstat(fd).st_size + 1, 1 << 20))
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


def mark(conn: sqlite3.Connection, done: list[tuple[str, int]]) -> None:
    """Inside the write transaction: ``kv['spool:<id>'] = seq`` for each committed spooled row."""
    conn.executemany("INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                     "value = excluded.value", [(MARKER + ident, str(seq)) for ident, seq in done])


__all__ = ["ABANDONED_SECONDS", "Entry", "announce", "collect", "committed", "committing", "discard",
           "follow", "lead", "mark", "open_gate", "publish", "write"]
