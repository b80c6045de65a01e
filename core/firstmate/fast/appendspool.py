"""Group commit for concurrent appends: rows appended at once ride one transaction.

Every durable append is one ``COMMIT`` with an fsync, serialised by the queue lock. When more
producers append at once than there are cores, each waits behind every other's fsync in turn
and throughput falls. So each producer first takes its turn (:func:`take_turn`; who leads next
is decided under the spool's gate ``state/spool/.gate``, held for a few system calls):

1. with no commit in progress, it *leads*: it announces its commit (a fresh
   ``state/spool/.commit``, held exclusively until the commit ends), takes the queue lock and,
   in one transaction, takes its announcement off the name (:func:`withdraw`: producers coming
   now lead or follow the next commit, which gets ready while this one commits), reads the rows
   that rode on it (:func:`riders`) and commits them with its own, with beside each a marker
   ``kv['rode:<id>'] = seq``; after the ``COMMIT`` it appends ``<id> <seq>`` lines for the rows
   it took to the announcement, then lets go of it;
2. with a commit in progress, it *follows*: it appends its already-validated row to that
   commit's announcement (:func:`ride`: one ``O_APPEND`` write of a framed record, no fsync:
   until committed it is only a request) and sleeps on it (shared). Woken by the end of the
   commit, it reads its number there. A row that may have come after its leader read the
   announcement (the name was already withdrawn once it was written) takes its turn again at
   once: it rides the next commit or leads it.

Riding costs a follower one write to a file that already exists: no file is created or removed
per row, so producers never queue on the spool directory's lock nor on the filesystem's inode
allocation, which under load cost more than the rest of an append.

Followers never wait for the queue lock, nor for a lock a next leader could take again before
they run: each announcement is a new file, locked once. A row may ride more than one
announcement (its producer cannot tell whether a withdrawn one was read): the markers commit
atomically with the rows, and a leader reads them holding the queue lock, after every earlier
commit, so a row whose marker exists is never inserted again: its number is listed instead. So
a follower whose leader was killed between its ``COMMIT`` and its list learns its number from the
next commit it rides, and one that comes to lead checks its marker first. Markers older than
:data:`ABANDONED_SECONDS` (their id starts with the time) are deleted by a commit within
:data:`PRUNE_EVERY` seconds after that (:func:`prune`). A
record that is not a valid row (damaged, or written by another program) is set aside in the
database, never inserted.

Rows an earlier version spooled as files ``state/spool/<id>`` (a producer still waiting while fm
was upgraded) are still committed by :func:`collect`, with markers ``kv['spool:<id>']``, under
that version's rules: a marker whose file is gone is deleted; a committed file whose producer
died is removed after :data:`ABANDONED_SECONDS`; a file that is not a row is set aside.

An uncontended append (no commit in progress, the queue lock free) leads at once without an
announcement (:func:`lead_at_once`): nobody can ride it, and a producer that comes meanwhile
announces the next commit. While the spool directory is unchanged since a commit found
nothing in it to do, that costs one ``lstat`` (:func:`idle`): no gate opened, no listing.
Standard library only, like the rest of the append path.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time

from firstmate.base import dbconn
from firstmate.base.dbconn import sqlite3  # the C module alone (see dbconn)
from firstmate.base.safepaths import make_private_dir, open_private, refuse_symlink, state_error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate.base.safepaths import StrPath

SPOOL_DIR = "spool"
#: The marker of a row an earlier version spooled as a file.
MARKER = "spool:"
#: The marker of a row that rode an announcement.
RIDER = "rode:"
#: The marker of a leader's own row: a retry of an append left in doubt looks for it
#: (:mod:`firstmate.fast.appenddoubt`).
LED = "led:"
#: Held exclusively for the few system calls of deciding who leads (:func:`take_turn`).
GATE = ".gate"
#: Appends whose commit ended in doubt (:mod:`firstmate.fast.appenddoubt`).
DOUBT = ".doubt"
#: The commit in progress, renamed into place fresh by each leader and held exclusively until
#: its commit ends; followers sleep on it shared.
NOTE = ".commit"
#: A committed row's spool file older than this has lost its producer (killed while waiting).
ABANDONED_SECONDS = 600.0
#: A spool directory changed less than this long before it was listed is listed again at the
#: next commit: a change within one tick of a file system's clock can leave its timestamp as it
#: was (two seconds: the coarsest a local file system keeps).
SETTLED_SECONDS = 2.0
#: A process prunes the markers of one database at most this often (:func:`prune`).
PRUNE_EVERY = 60.0
SEP = "\x00"  # cleaned text never holds a NUL (wakeinput.clean removes control characters)
END = "\x00\x00"  # after the last field: the row is whole
START = "\x01"  # before a riding record's first field (never in cleaned text either)

#: One spooled row: (id, at, kind, key, payload).
Entry = tuple[str, float, str, str, str]


def spool_dir(state: StrPath) -> str:
    return os.path.join(os.fspath(state), SPOOL_DIR)


#: The spool directory as :func:`collect` last listed it with nothing in it for a commit to do
#: (no spooled row, no announcement, no temporary file, no append in doubt, the gate a plain file
#: or absent):
#: ``(path, device, inode, ctime)``. While the directory's ctime is unchanged no entry was
#: added, removed or renamed there, so :func:`idle` proves with one ``lstat`` that this is still
#: so. (A ctime cannot be set back as an mtime can; a fact about the files, so a forked child
#: may keep it.)
_idle: tuple[str, int, int, int] | None = None


def idle(state: StrPath) -> bool:
    """True when one ``lstat`` proves the spool directory unchanged since :func:`collect` found
    it holding nothing for a commit to do (see ``_idle``): a commit need not list it, nor look
    for appends in doubt, and an uncontended producer need not open its gate nor look for an
    announcement."""
    folder = spool_dir(state)
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return _idle == (folder, st.st_dev, st.st_ino, st.st_ctime_ns)


def open_gate(state: StrPath) -> int:
    """A descriptor on ``state/spool/.gate`` (the spool directory is created 0700 if missing)."""
    folder = spool_dir(state)
    try:
        is_dir = stat.S_ISDIR(os.lstat(folder).st_mode)  # (a symlink is not: refused below)
    except FileNotFoundError:
        is_dir = False
    if not is_dir:
        make_private_dir(folder)
    path = os.path.join(folder, GATE)
    try:
        # Without O_CREAT when it exists: an open that may create takes the directory's lock
        # exclusively, and every producer's opens would queue on it. (O_NONBLOCK: a FIFO planted
        # there must not hang the append; it is refused below.)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return open_private(path, os.O_RDWR | os.O_CREAT)  # (or its one-line error)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _unusable(GATE, state, None)
    return fd


def _unusable(name: str, state: StrPath, exc: OSError | None) -> Exception:
    """The one-line error for a spool control file that is not a plain file of ours."""
    what = "is not a regular file" if exc is None else f"cannot be opened ({exc.strerror})"
    return state_error(f"{os.path.join(spool_dir(state), name)} {what}; remove it and let fm "
                       "recreate it")


def announce(state: StrPath) -> int:
    """Under the gate: a fresh ``state/spool/.commit``, held exclusively until the caller closes
    the returned descriptor after its commit (and :func:`publish`). Followers sleep on it shared.

    A fresh file each commit, never locked again once released: followers woken by its release
    always get it, however soon the next leader starts (on one shared lock file they could be
    shut out again by each next commit while waiting for a CPU, for seconds under load).
    """
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


def withdraw(state: StrPath, note: int) -> None:
    """For a leader holding the queue lock, before it reads the rows that rode *note*: take its
    announcement (still held) off the name ``.commit``, so that producers coming now lead or
    follow the next commit, which can get ready (announce, open its database) while this one
    commits, instead of sleeping through this one first, and so that a row written from now on
    is known to be late (:func:`ride`). Its followers keep the descriptor they sleep on."""
    path = os.path.join(spool_dir(state), NOTE)
    try:
        named, held = os.lstat(path), os.fstat(note)
        # Nobody replaces a held announcement, so the name is still ours; checked all the same.
        if (named.st_ino, named.st_dev) == (held.st_ino, held.st_dev):
            os.unlink(path)
    except OSError:
        pass  # best effort: a row that rides it late then waits for this commit, and goes again


def publish(note: int, served: list[tuple[str, int]]) -> None:
    """After the commit: write ``<id> <seq>`` lines for the rows it took into the announcement,
    so that followers woken by its release read their numbers without opening the database.
    One write; losing it (a leader killed first) costs followers only a look at their markers.
    (It starts with a line break: a follower looks for ``\\n<id> ``, and the announcement may
    end in a record that rode it too late.)"""
    if served:
        try:  # noqa: SIM105 - contextlib costs the append path an import
            os.write(note, "".join(f"\n{ident} {seq}" for ident, seq in served).encode() + b"\n")
        except OSError:  # (a full disk): the rows are committed all the same
            pass


def _named(note: int, ident: str | None) -> int | None:
    """The sequence number the (finished) announcement *note* gives *ident*, if it names it."""
    if ident is None:
        return None
    size = os.fstat(note).st_size
    if not size:
        return None
    data = b"\n" + os.pread(note, size, 0)
    at = data.find(f"\n{ident} ".encode())
    if at < 0:
        return None
    end = data.find(b"\n", at + 1)
    try:
        return int(data[at + len(ident) + 2:end if end >= 0 else len(data)])
    except ValueError:
        return None


def _in_progress(state: StrPath, ident: str | None) -> tuple[int, int | None]:
    """``(note, seq)``: the announcement of the commit in progress (open; -1 when none is), and
    when none is, the number the last announcement gives *ident* if it names it."""
    try:
        # Read-write, appending: a follower rides it (:func:`ride`), then reads its number there.
        note = os.open(os.path.join(spool_dir(state), NOTE),
                       os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return -1, None
    except OSError as exc:
        raise _unusable(NOTE, state, exc) from exc
    if not stat.S_ISREG(os.fstat(note).st_mode):
        os.close(note)
        raise _unusable(NOTE, state, None)
    try:
        fcntl.flock(note, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return note, None  # its leader holds it: a commit is in progress
    except BaseException:
        os.close(note)
        raise
    try:
        return -1, _named(note, ident)
    finally:
        os.close(note)


def take_turn(state: StrPath, gate: int, ident: str | None) -> tuple[int, int, int | None]:
    """Lead the next commit or follow the one in progress: ``(mine, theirs, seq)``.

    If a commit is announced and still in progress, *theirs* is its announcement (the caller
    sleeps on it with :func:`await_commit`); else, if the last announcement names *ident*,
    *seq* is its number; else we lead: *mine* is our own fresh announcement. The unused
    descriptors are -1. Following needs no lock (a held announcement is a commit to wait for,
    whatever replaced it since); becoming the leader is decided under the gate, held for a few
    system calls.
    """
    theirs, seq = _in_progress(state, ident)
    if theirs >= 0 or seq is not None:
        return -1, theirs, seq
    fcntl.flock(gate, fcntl.LOCK_EX)
    try:
        theirs, seq = _in_progress(state, ident)  # again: another may have led meanwhile
        if theirs >= 0 or seq is not None:
            return -1, theirs, seq
        return announce(state), -1, None
    finally:
        fcntl.flock(gate, fcntl.LOCK_UN)


def lead_at_once(state: StrPath, lock_path: StrPath, unannounced: bool = False) -> int:
    """With no commit in progress and the queue lock free, that lock, taken: the caller leads
    an unannounced commit of its own row (-1 otherwise, and it takes its turn as usual).

    Nobody can ride a commit that is not announced, so this costs no producer anything: one
    that comes meanwhile finds no announcement, announces the next commit and waits for the
    queue lock, and the rows that ride it go in together, as they do behind a withdrawn
    announcement. It spares the uncontended append the announcement's create, rename and
    unlink (directory changes the commit's fsync would carry). *unannounced*: the caller knows
    that no commit is announced (:func:`idle`), so there is no announcement to look for."""
    if not unannounced:
        theirs, _ = _in_progress(state, None)
        if theirs >= 0:
            os.close(theirs)
            return -1
    fd = open_private(lock_path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return -1
    except BaseException:
        os.close(fd)
        raise
    return fd


def new_ident() -> str:
    """A row's id: the time first (markers are pruned by it), then who and a random part."""
    return f"{time.time_ns():020d}-{os.getpid()}-{os.urandom(4).hex()}"


def ride(state: StrPath, note: int, row: tuple[float, str, str, str], ident: str) -> bool:
    """Append the validated row ``(at, kind, key, payload)`` as *ident* to the announcement
    *note* of the commit in progress: True when it came in time (its leader reads it), False
    when the announcement was already withdrawn once it was written (its leader may have read
    the rows before it: the caller takes its turn again at once, and the markers see to it that
    a row read twice is inserted once).

    One ``O_APPEND`` write, so records of producers riding at once never interleave. A short
    write (a full disk) leaves a record without its end, which the leader passes over."""
    at, kind, key, payload = row
    os.write(note, (START + SEP.join((ident, repr(float(at)), kind, key, payload)) + END).encode())
    try:
        named, held = os.lstat(os.path.join(spool_dir(state), NOTE)), os.fstat(note)
    except FileNotFoundError:
        return False
    # Still under the name once written: its leader withdraws it before reading, so reads it.
    return (named.st_ino, named.st_dev) == (held.st_ino, held.st_dev)


def await_commit(note: int, ident: str) -> int | None:
    """Sleep until the commit announced by *note* ends (then close it): the number it gave
    *ident*, or None when it did not take our row (it came too late, or the leader was killed
    before listing it: the caller takes its turn again)."""
    try:
        fcntl.flock(note, fcntl.LOCK_SH)  # granted once its leader lets go: nobody locks it again
        return _named(note, ident)
    finally:
        os.close(note)


class committing:  # (lower case: used like a function, ``with committing(state):``)
    """Lead a commit as a producer does, announced (the caller holds the queue lock if it wants
    it held); producers that come meanwhile follow it and wake together when it ends. A plain
    class: contextlib costs the append path an import."""

    def __init__(self, state: StrPath) -> None:
        self.state = state
        self.note = -1

    def __enter__(self) -> None:
        gate = open_gate(self.state)
        try:
            while True:
                mine, theirs, _seq = take_turn(self.state, gate, None)
                if mine >= 0:
                    self.note = mine
                    return
                fcntl.flock(theirs, fcntl.LOCK_SH)  # a commit in progress: after it
                os.close(theirs)
        finally:
            os.close(gate)

    def __exit__(self, *exc: object) -> None:
        os.close(self.note)  # closing the last descriptor releases the flock


def committed(conn: sqlite3.Connection, ident: str) -> int | None:
    """The sequence number a committer gave row *ident* (that rode, or was spooled), if one did."""
    row = conn.execute("SELECT value FROM kv WHERE key IN (?, ?, ?)",
                       (RIDER + ident, LED + ident, MARKER + ident)).fetchone()
    try:
        return int(row[0]) if row else None
    except (TypeError, ValueError):
        return None


def parse_row(data: bytes) -> tuple[float, str, str, str] | None:
    """The row ``(at, kind, key, payload)`` a framed record's fields hold (after its id), or
    None when they are not one a producer validated."""
    from firstmate.base.errors import UsageError
    from firstmate.base.wakeinput import validate

    try:
        at, kind, key, payload = data.decode("utf-8").split(SEP)
        if validate(kind, key, payload) != (kind, key, payload):
            return None  # a producer spools rows it validated: this one was not written by one
        return float(at), kind, key, payload
    except (ValueError, UsageError):  # wrong field count, not UTF-8, not a number, not a row
        return None


#: When this process last pruned the markers of a database: ``(database, time.monotonic())``.
_pruned: tuple[str, float] | None = None


def prune(conn: sqlite3.Connection, db_path: StrPath | None = None) -> None:
    """Inside the write transaction: delete the markers of rows that rode or led older than
    :data:`ABANDONED_SECONDS` (their id starts with the time). Given *db_path*, only when this
    process has not pruned that database in the last :data:`PRUNE_EVERY` seconds (only the
    first commit in that time pays for it: a marker lives a minute longer at most, and keeping
    one longer never lets a row in twice)."""
    global _pruned
    if db_path is not None:
        now, name = time.monotonic(), os.fspath(db_path)
        if _pruned is not None and _pruned[0] == name and now - _pruned[1] < PRUNE_EVERY:
            return
        _pruned = (name, now)
    oldest = f"{time.time_ns() - int(ABANDONED_SECONDS * 1e9):020d}"
    for prefix in (RIDER, LED):
        conn.execute("DELETE FROM kv WHERE key >= ? AND key < ?", (prefix, prefix + oldest))


def riders(conn: sqlite3.Connection, note: int, already: list[tuple[str, int]],
           db_path: StrPath | None = None) -> list[Entry]:
    """Inside the write transaction, once *note* (the leader's own announcement) is withdrawn:
    the rows that rode it, in the order they came, each once. A row an earlier commit took
    (its marker exists) is added to *already* as ``(id, seq)`` instead: the announcement names
    it. A record cut short (a full disk) is passed over; one that is not a row is set aside.
    Markers older than :data:`ABANDONED_SECONDS` are deleted (:func:`prune`, given
    *db_path*)."""
    prune(conn, db_path)
    size = os.fstat(note).st_size
    data = os.pread(note, size, 0) if size else b""
    out: list[Entry] = []
    seen: set[str] = set()
    for record in data.split(START.encode())[1:]:
        end = record.find(END.encode())
        if end < 0:
            continue  # cut short: its producer rides again or leads
        fields = None
        ident, _, rest = record[:end].partition(SEP.encode())
        try:
            name = ident.decode("ascii")
        except UnicodeDecodeError:
            name = ""
        if name and name.isprintable() and SEP not in name and len(name) <= 100:
            fields = parse_row(rest)
        if fields is None:
            dbconn.set_aside(conn, "riding row", record[:500].decode("utf-8", "replace"))
            continue
        if name in seen:
            continue
        seen.add(name)
        got = committed(conn, name)
        if got is not None:
            already.append((name, got))
            continue
        out.append((name, *fields))
    return out


def collect(conn: sqlite3.Connection, state: StrPath,
            already: list[tuple[str, int]] | None = None) -> list[Entry]:
    """Inside the write transaction: the rows an earlier version spooled as files, still to
    insert, oldest first. Each one a commit already took, still waiting for its producer to
    read its number, is added to *already* as ``(id, seq)``: the leader's announcement repeats
    it, so a follower that slept through the commit which took its row learns its number from
    the next one.

    Also tidies up: markers whose spool file is gone are deleted, abandoned files (and the
    temporary files of leaders killed before renaming their announcement) removed, and files
    that are not rows set aside. A listing that finds nothing to do is remembered for
    :func:`idle`.
    """
    global _idle
    folder = spool_dir(state)
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return []
    if stat.S_ISLNK(st.st_mode):
        refuse_symlink(folder)  # a planted link would feed another directory's files in as rows
    seen = (folder, st.st_dev, st.st_ino, st.st_ctime_ns)
    # (stat before listing: a change made after it shows as a later ctime)
    settled = time.time() - st.st_ctime_ns / 1e9 > SETTLED_SECONDS
    _idle = None
    try:
        listed = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    names = [n for n in listed if not n.startswith(".")]
    names.sort()
    now = time.time()
    for name in listed:
        if name.startswith(".") and name.endswith(".tmp"):  # a leader killed before its rename
            try:
                if now - os.lstat(os.path.join(folder, name)).st_mtime > ABANDONED_SECONDS:
                    os.unlink(os.path.join(folder, name))
            except OSError:
                pass
    present = set(names)
    marked = {str(k)[len(MARKER):]: v for (k, v) in conn.execute(
        "SELECT key, value FROM kv WHERE key >= ? AND key < ?", (MARKER, "spool;"))}
    if settled and not names and not marked and _sound_controls(folder, listed):
        _idle = seen
    gone = marked.keys() - present
    if gone:
        conn.executemany("DELETE FROM kv WHERE key = ?", [(MARKER + g,) for g in gone])
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
            # (O_NONBLOCK: opening a FIFO planted in the spool must not wait for a writer.)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            continue
        except OSError:  # a symlink or worse: never followed, never inserted
            fields = None
            data = b""
        else:
            try:
                st = os.fstat(fd)
                # As much as is there (a row is a few kilobytes at most): a fixed large buffer
                # would cost an allocation the size of it for every row. Only a plain file can
                # be a row (a FIFO, a directory: set aside at once).
                data = os.read(fd, min(st.st_size + 1, 1 << 20)) if stat.S_ISREG(st.st_mode) else b""
            finally:
                os.close(fd)
            if stat.S_ISDIR(st.st_mode):
                continue  # never a row, and not ours to remove: passed over
            if (stat.S_ISREG(st.st_mode) and not data.endswith(END.encode())
                    and now - st.st_mtime <= ABANDONED_SECONDS):
                continue  # still being written: a later commit takes it
            fields = parse_row(data[:-len(END)]) if data.endswith(END.encode()) else None
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


def _sound_controls(folder: str, listed: list[str]) -> bool:
    """No announcement, no temporary file and no append in doubt among *listed*, and the gate
    a plain file or absent (a planted one is refused by the producer that opens it)."""
    if DOUBT in listed or NOTE in listed or any(n.startswith(".") and n.endswith(".tmp") for n in listed):
        return False
    if GATE not in listed:
        return True
    try:
        return stat.S_ISREG(os.lstat(os.path.join(folder, GATE)).st_mode)
    except OSError:
        return False


def mark(conn: sqlite3.Connection, done: list[tuple[str, int]], prefix: str) -> None:
    """Inside the write transaction: ``kv['<prefix><id>'] = seq`` for each committed row that
    rode (:data:`RIDER`), was spooled (:data:`MARKER`) or is its leader's own (:data:`LED`)."""
    if not done:
        return
    conn.executemany("INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                     "value = excluded.value", [(prefix + ident, str(seq)) for ident, seq in done])


__all__ = ["ABANDONED_SECONDS", "DOUBT", "END", "LED", "SEP", "START", "Entry", "announce", "await_commit",
           "collect", "committed", "committing", "idle", "lead_at_once", "mark", "new_ident", "open_gate",
           "parse_row", "prune", "publish", "ride", "riders", "spool_dir", "take_turn", "withdraw"]
