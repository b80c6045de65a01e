"""Appending one wake row: the single implementation behind ``queue.append`` and ``fm wake append``.

``fm wake append`` runs on every harness turn, so everything here is plain functions over plain
values and nothing imports attrs (nor psutil, pluggy, argparse, hashlib or socket). The steps are
always the same, whoever calls them:

1. validate and clean the arguments (:mod:`firstmate.base.wakeinput`), before touching the home;
2. lead the commit, or follow one (:mod:`firstmate.fast.appendspool`: a producer that finds
   another committing rides its row on that commit's announcement, and that commit or the next
   takes it);
3. the leader takes the queue lock ``state/queue.lock`` (a kernel ``flock`` with the usual owner
   record, so ``FileLock.holder()`` names us) and waits for it as long as it takes;
   ``BEGIN IMMEDIATE``; publishes downtime evidence for the append
   (:func:`firstmate.fast.episoderow.publish_downtime`), allocates the sequence numbers and
   inserts its row and the ones that rode with it; ``COMMIT`` (so a queued row never exists
   without its episode); releases the lock;
4. ring the watcher's doorbell, at once after the ``COMMIT`` (before the lock is released and
   the followers are told their numbers, so the watcher wakes while the leader tidies up).

A disk that fails step 3 gets up to three tries on the same connection, each failed commit
settled first (:mod:`firstmate.base.dbfault`), so no try inserts a row twice, and the error of the
last says whether the row may still take effect; when it may, the row is left in doubt
(:mod:`firstmate.fast.appenddoubt`) and the same append run again is queued once.

The command-line entry :func:`append` opens the database itself, when it exists, only when it
needs it (a follower told its number by the commit that took its row never does), and writes
only at the current schema; anything else (a new home, an older schema that needs migrating, a
platform without ``/proc/self`` or POSIX ``flock``) goes through the caller's *fallback*: the
full :func:`firstmate.store.queue.append`, which creates or migrates the store. This module
stays inside the standard-library layer: it never imports the store itself.
"""

from __future__ import annotations

import fcntl
import os
import time

from firstmate.base import dbconn, ownerlock
from firstmate.base.dbconn import sqlite3  # the C module alone (see dbconn)
from firstmate.base.safepaths import open_private
from firstmate.fast import appendspool, bell, episoderow

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from firstmate.base.safepaths import StrPath
    from firstmate.fast.appendspool import Entry


def insert(conn: sqlite3.Connection, kind: str, key: str, payload: str, at: float | None = None) -> int:
    """Inside a write transaction: downtime evidence, then the row; returns its sequence."""
    # Recovery evidence first: a queued row never exists without its episode.
    episoderow.publish_downtime(conn, append=True)
    return _row(conn, kind, key, payload, at)


def _row(conn: sqlite3.Connection, kind: str, key: str, payload: str, at: float | None) -> int:
    seq = dbconn.next_seq(conn)
    conn.execute(
        "INSERT INTO wakes (seq, at, kind, key, payload) VALUES (?, ?, ?, ?, ?)",
        (seq, time.time() if at is None else float(at), kind, key, payload),
    )
    return seq


def commit(conn: sqlite3.Connection, db_path: StrPath, lock_path: StrPath, root: StrPath,
           kind: str, key: str, payload: str, *, at: float | None = None,
           token: str | None = None) -> int:
    """Hold the queue lock and one ``BEGIN IMMEDIATE`` transaction around :func:`insert`.

    POSIX only (``flock``). *kind*, *key* and *payload* must already be validated; *token* is
    this process's identity token for the lock's owner record (read from ``/proc/self`` when
    not given). Waits for both locks as long as it must. Rings the doorbell as soon as its
    transaction commits (before it lets go of the queue lock); a row another producer's commit
    took was rung by that producer.

    Producers take turns before the queue lock (:mod:`firstmate.fast.appendspool`). One that
    finds no commit in progress leads: it takes the queue lock and commits, in one transaction,
    its row and every one that rode its announcement. One that finds a commit in progress
    rides its row on that announcement and sleeps until that commit ends; its row went in with
    it, or it takes its turn again: concurrent producers share fsyncs instead of queueing for
    one each.
    """
    seq = _commit(_Given(conn), db_path, lock_path, root, (kind, key, payload), at, token)
    assert seq is not None  # a given connection is the current schema's (the store migrated it)
    return seq


class _Given:
    """A connection the caller opened (the store's), at the current schema."""

    current = True

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __call__(self) -> sqlite3.Connection:
        return self.conn


class _Lazy:
    """The database connection of ``fm wake append``, opened when first needed: a follower
    that learns its sequence number from the commit that took its row never opens it."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.conn: sqlite3.Connection | None = None
        self.current = False

    def close(self) -> None:
        # Never an error once the row may be committed: its caller must not append it again.
        if self.conn is not None:
            try:  # noqa: SIM105 - contextlib costs every append an import
                self.conn.close()
            except sqlite3.Error:
                pass
            self.conn = None

    def __call__(self) -> sqlite3.Connection:
        if self.conn is None:
            conn = dbconn.open_connection(self.db)
            try:
                self.current = dbconn.schema_version(conn) == dbconn.SCHEMA_VERSION
            except sqlite3.Error as exc:
                conn.close()
                raise dbconn.translate(self.db, exc) from exc
            self.conn = conn
        return self.conn


def _commit(conn: _Given | _Lazy, db_path: StrPath, lock_path: StrPath, root: StrPath,
            row: tuple[str, str, str], at: float | None, token: str | None) -> int | None:
    """:func:`commit` over a connection opened on demand; None when the database turns out not
    to be at the current schema (nothing was written: the caller appends through the store)."""
    kind, key, payload = row
    state = os.path.dirname(os.fspath(lock_path))
    at = time.time() if at is None else float(at)
    ident: str | None = None
    note = -1
    held = -1  # the queue lock, when it was free with no commit in progress
    # Led at once with the spool idle, seen just before: nothing can ride an unannounced
    # commit, so the look the commit takes at the spool under the queue lock is spared too.
    quiet = False
    try:
        # A spool directory unchanged since a commit found nothing there (no announcement, its
        # gate sound): an uncontended producer takes the free queue lock without opening the
        # gate or looking for an announcement.
        if appendspool.idle(state):
            held = appendspool.lead_at_once(state, lock_path, unannounced=True)
            quiet = held >= 0
        gate = appendspool.open_gate(state) if held < 0 else -1
        try:
            if gate >= 0:
                held = appendspool.lead_at_once(state, lock_path)
            while held < 0:
                note, theirs, seq = appendspool.take_turn(state, gate, ident)
                if seq is None and theirs >= 0:  # a commit is in progress: ride it
                    try:
                        if ident is None:
                            ident = appendspool.new_ident()
                        in_time = appendspool.ride(state, theirs, (at, kind, key, payload), ident)
                    except BaseException:
                        os.close(theirs)
                        raise
                    if in_time:
                        seq = appendspool.await_commit(theirs, ident)
                    else:  # its leader may have read the rows already: the next commit, now
                        os.close(theirs)
                if seq is not None:
                    return seq
                if note >= 0:
                    break
        finally:
            if gate >= 0:
                os.close(gate)
    except OSError as exc:
        if ident is None:  # our row rode nothing: nothing of ours was written anywhere
            raise ownerlock.lock_failed(lock_path, exc) from exc
        # Our row may have ridden a commit we could not hear back from (the disk failed us):
        # lead without the spool, and our marker, read under the queue lock, tells.
        note = -1
    # We lead: our announcement is up (unless the spool failed us, or we hold the queue lock
    # already, taken free with no commit in progress), and our row (if it rode an
    # earlier one, as *ident*) is not known to be committed. The commit before ours may still
    # be running (it withdrew its announcement once it held the queue lock): the queue lock
    # waits for it, and only then are markers final.
    try:
        try:
            if held >= 0:
                fd = held
                try:
                    conn()
                except BaseException:
                    ownerlock.release(fd)
                    raise
            else:
                conn()  # opened now if it was not, while the commit before ours finishes
                try:
                    fd = open_private(lock_path, os.O_RDWR | os.O_CREAT)
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX)
                    except BaseException:
                        os.close(fd)
                        raise
                except OSError as exc:
                    raise ownerlock.lock_failed(lock_path, exc) from exc
        except Exception as exc:
            if ident is None:
                raise
            # Our row rode a commit and may be in it: never "not written", and a retry of the
            # same append is queued once.
            from firstmate.fast import appenddoubt

            raise appenddoubt.append_failed(state, db_path, (ident, at, kind, key, payload), exc,
                                            True, rode=True) from exc
        served: list[tuple[str, int]] = []
        try:
            if not conn.current:
                seq = None
                if ident is not None:  # a commit by the store may have taken it meanwhile
                    try:
                        seq = appendspool.committed(conn(), ident)
                    except sqlite3.Error:
                        seq = None  # a database not yet migrated has no markers
                return seq  # else not ours to insert into this database: the store will
            ownerlock.write_record(fd, lock_path, "queue", root, token)
            seq = commit_locked(conn(), db_path, state, (at, kind, key, payload), ident, served,
                                note, idle=quiet)
            # The rows are durable: the watcher is rung now, and wakes while this leader lets
            # go of the queue lock and tells its followers their numbers.
            bell.ring_address(bell.address_of(state))
        finally:
            ownerlock.release(fd)
        if note >= 0:
            appendspool.publish(note, served)
    finally:
        if note >= 0:
            os.close(note)  # closing the last descriptor releases it: our followers wake
    return seq


#: Transactions an append tries before it reports a failing disk (each failure is settled or
#: known to have written nothing, see commit_locked).
ATTEMPTS = 3


def commit_locked(conn: sqlite3.Connection, db_path: StrPath, state: StrPath,
                  own: tuple[float, str, str, str], ident: str | None = None,
                  served: list[tuple[str, int]] | None = None, note: int = -1, *,
                  idle: bool = False) -> int:
    """For the leader of a commit, holding the queue lock: one transaction with downtime
    evidence, every row that rode its announcement *note* (when given: withdrawn first, then
    read), every row an earlier version spooled as a file, and *own* ``(at, kind, key,
    payload)`` as *ident* (a fresh id when None), which is inserted unless a commit already
    took it (its marker) or it is the retry of an append left in doubt that did take effect
    (:mod:`firstmate.fast.appenddoubt`); returns *own*'s sequence number. Every row inserted
    gets its marker. Once committed, *served* gets ``(id, seq)`` for each row it took and each
    one an earlier commit took (for the announcement). *idle*: the caller saw the spool idle
    (:func:`firstmate.fast.appendspool.idle`) just before it took the queue lock for an
    unannounced commit, so the commit does not look at the spool again.

    A disk that fails the transaction gets :data:`ATTEMPTS` tries in all, on the same
    connection: a failed one is settled or known to have written nothing
    (:mod:`firstmate.base.dbfault`), so the next cannot insert a row twice. When none commits,
    the error says whether the row may still take effect, and when it may, the row is left in
    doubt for a retry of the same append to resolve."""
    # A row that rode an earlier announcement may have been taken by its commit: its marker.
    rode = ident is not None
    ident = ident or appendspool.new_ident()
    doubt = False
    for attempt in range(ATTEMPTS):
        try:
            seq, done = _transact(conn, db_path, state, (ident, *own), note, rode, idle)
        except Exception as exc:
            from firstmate.base import dbfault
            from firstmate.fast import appenddoubt

            outcome = dbfault.outcome(exc)
            if outcome is None:
                raise  # not the disk failing us: as it is
            doubt = outcome == "doubt" or (doubt and outcome != "settled")
            if attempt + 1 < ATTEMPTS:
                continue
            # A row that rode an earlier commit may be in it, whatever these tries did.
            failure = appenddoubt.append_failed(state, db_path, (ident, *own), exc,
                                                doubt or rode, rode=rode and not doubt)
            if failure is exc:
                raise
            raise failure from exc
        if served is not None:
            served += done
        return seq
    raise AssertionError("unreachable")  # pragma: no cover


def _transact(conn: sqlite3.Connection, db_path: StrPath, state: StrPath,
              own: Entry, note: int, rode_before: bool,
              idle: bool = False) -> tuple[int, list[tuple[str, int]]]:
    """One try of :func:`commit_locked`: *own*'s number and the ``(id, seq)`` list it served."""
    dbconn.start(conn, db_path)
    doubts: list[Entry] | None = None
    resolved: set[str] = set()
    try:
        episoderow.publish_downtime(conn, append=True)  # once: the batch is one append
        already: list[tuple[str, int]] = []
        rode: list[appendspool.Entry] = []
        if note >= 0:
            # Off the name first: a row that rides it from now on is known to be late.
            appendspool.withdraw(state, note)
            rode = appendspool.riders(conn, note, already, db_path)  # (and prunes old markers)
        else:  # an unannounced commit: nothing rode it, and old markers go all the same
            appendspool.prune(conn, db_path)
        # Under the queue lock, where the listing would be: one lstat proves that nothing was
        # spooled as a file nor left in doubt since a listing found nothing.
        idle = idle or appendspool.idle(state)
        files = [] if idle else appendspool.collect(conn, state, already)
        ident = own[0]
        mine: list[appendspool.Entry] = []
        if not any(entry[0] == ident for entry in files + rode):
            got = appendspool.committed(conn, ident) if rode_before else None
            if got is None:
                mine = [own]
            else:  # a commit whose list we missed took it
                already.append((ident, got))
        doubts = None if idle else _doubts(state)
        if doubts:
            from firstmate.fast import appenddoubt

            files, gone = appenddoubt.resolve(conn, doubts, files, already)
            rode, more = appenddoubt.resolve(conn, doubts, rode, already)
            mine, last = appenddoubt.resolve(conn, doubts, mine, already)
            resolved = gone | more | last
        entries = files + rode + mine
        first = dbconn.next_seqs(conn, len(entries)) if entries else 0
        rows = [(first + i, at, kind, key, payload)
                for i, (_entry, at, kind, key, payload) in enumerate(entries)]
        if rows:
            conn.executemany(
                "INSERT INTO wakes (seq, at, kind, key, payload) VALUES (?, ?, ?, ?, ?)", rows)
        done = [(entry[0], first + i) for i, entry in enumerate(entries)]
        rides = len(files) + len(rode)
        appendspool.mark(conn, done[:len(files)], appendspool.MARKER)
        appendspool.mark(conn, done[len(files):rides], appendspool.RIDER)
        appendspool.mark(conn, done[rides:], appendspool.LED)
    except BaseException as exc:
        dbconn.abort(conn, db_path, exc)
        raise
    dbconn.commit(conn, db_path)
    if doubts is not None:
        from firstmate.fast import appenddoubt

        appenddoubt.forget(state, doubts, resolved)
    served = done + already
    seq = next(got for name, got in served if name == ident)
    return seq, [(name, got) for name, got in served if name != ident]


def _doubts(state: StrPath) -> list[Entry] | None:
    """The appends left in doubt (:mod:`firstmate.fast.appenddoubt`); None when there is no
    such file, known from one ``lstat`` (the module is imported only when there is)."""
    try:
        os.lstat(os.path.join(appendspool.spool_dir(state), appendspool.DOUBT))
    except FileNotFoundError:
        return None
    except OSError:
        return []
    from firstmate.fast import appenddoubt

    return appenddoubt.read(state)


def _usable(state: str, db: str) -> bool:
    """The database file exists and may be opened (the schema is checked when it is opened);
    False: the caller's full path creates it."""
    dbconn.check_paths(state, db)
    try:
        os.lstat(db)
    except FileNotFoundError:
        return False
    dbconn.prepare_file(db)
    return True


def append(kind: str, key: str, payload: str, env: Mapping[str, str] | None = None, *,
           fallback: Callable[[str, str, str, str], int], close: bool = False) -> int:
    """``fm wake append KIND KEY PAYLOAD`` for the home *env* names: the new row's sequence.

    ``fallback(root, kind, key, payload)`` appends through the full store when this path cannot
    (see the module docstring); it rings the doorbell itself. *close* closes the connection
    before returning: a process that leaves without its teardown must (cli.main.leave_at_once),
    so that the last close checkpoints and the database file is whole once fm is idle. A caller
    that goes on appending leaves it to the collector: closing the last connection checkpoints
    and removes the write-ahead log, work its next append would pay for again.
    """
    from firstmate.base.homemark import ensure_home
    from firstmate.base.homeroot import find_root
    from firstmate.base.procself import current_fields
    from firstmate.base.wakeinput import validate

    kind, key, payload = validate(kind, key, payload)  # before touching the home: nothing written
    env = os.environ if env is None else env
    root = find_root(env)
    if ensure_home(root, env):
        from firstmate.base.homeroot import announce_created

        announce_created(root, env)  # rows appended where nobody watches must not go unnoticed
    state = os.path.join(root, "state")
    db = os.path.join(state, "firstmate.db")
    if not (os.name == "posix" and current_fields() is not None and _usable(state, db)):
        return fallback(root, kind, key, payload)
    lazy = _Lazy(db)
    try:
        seq = _commit(lazy, db, os.path.join(state, "queue.lock"), root, (kind, key, payload),
                      None, None)
    finally:
        if close:
            lazy.close()
    if seq is None:
        return fallback(root, kind, key, payload)
    return seq  # (the commit that took the row rang the doorbell)


__all__ = ["append", "commit", "commit_locked", "insert"]
