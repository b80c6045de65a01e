"""Appending one wake row: the single implementation behind ``queue.append`` and ``fm wake append``.

``fm wake append`` runs on every harness turn, so everything here is plain functions over plain
values and nothing imports attrs (nor psutil, pluggy, argparse, hashlib or socket). The steps are
always the same, whoever calls them:

1. validate and clean the arguments (:mod:`firstmate.base.wakeinput`), before touching the home;
2. take the queue lock ``state/queue.lock`` (a kernel ``flock`` with the usual owner record, so
   ``FileLock.holder()`` names us) and wait for it as long as it takes;
3. ``BEGIN IMMEDIATE``; publish downtime evidence for the append
   (:func:`firstmate.base.episoderow.publish_downtime`), allocate the sequence number and insert the
   row; ``COMMIT`` (so a queued row never exists without its episode); release the lock;
4. ring the watcher's doorbell.

The command-line entry :func:`append` opens the database itself when it exists with the current
schema; anything else (a new home, an older schema that needs migrating, a platform without
``/proc/self`` or POSIX ``flock``) goes through the caller's *fallback*: the full
:func:`firstmate.store.queue.append`, which creates or migrates the store. This module stays inside the
standard-library layer: it never imports the store itself.
"""

from __future__ import annotations

import os
import time

from firstmate.base import dbconn, episoderow
from firstmate.base.dbconn import sqlite3  # the C module alone (see dbconn)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from firstmate.base.safepaths import StrPath


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
    not given). Waits for both locks as long as it must. Does not ring the doorbell (the caller
    does, after this returns).

    When the lock is taken, the row is spooled first and may be committed by whoever holds the
    lock next, in one transaction with every other waiting row
    (:mod:`firstmate.base.appendspool`): concurrent producers share fsyncs instead of queueing
    for one each.
    """
    import fcntl

    from firstmate.base import appendspool, ownerlock
    from firstmate.base.safepaths import open_private

    state = os.path.dirname(os.fspath(lock_path))
    at = time.time() if at is None else float(at)
    fd = open_private(lock_path, os.O_RDWR | os.O_CREAT)
    ident: str | None = None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            ident = appendspool.write(state, at, kind, key, payload)
            seq = appendspool.wait(conn, state, ident, fd)
            if seq is not None:
                os.close(fd)
                return seq
    except OSError as exc:
        os.close(fd)
        raise ownerlock.lock_failed(lock_path, exc) from exc
    except BaseException:
        os.close(fd)
        raise
    try:
        ownerlock.write_record(fd, lock_path, "queue", root, token)
        if ident is not None:
            seq = appendspool.committed(conn, ident)
            if seq is not None:  # a committer before us took our row
                appendspool.discard(state, ident)
                return seq
        with appendspool.committing(state):
            seq = commit_locked(conn, db_path, state, (at, kind, key, payload), ident)
        if ident is not None:
            appendspool.discard(state, ident)
        return seq
    finally:
        ownerlock.release(fd)


def commit_locked(conn: sqlite3.Connection, db_path: StrPath, state: StrPath,
                  own: tuple[float, str, str, str], ident: str | None = None) -> int:
    """For the holder of the queue lock and the spool's gate: one transaction with downtime
    evidence, every spooled row and *own* ``(at, kind, key, payload)`` (spooled as *ident*, or
    not spooled); returns *own*'s sequence number."""
    from firstmate.base import appendspool

    dbconn.start(conn, db_path)
    try:
        episoderow.publish_downtime(conn, append=True)  # once: the batch is one append
        seq = 0
        for entry, at, kind, key, payload in appendspool.collect(conn, state):
            got = _row(conn, kind, key, payload, at)
            appendspool.mark(conn, entry, got)
            if entry == ident:
                seq = got
        if not seq:  # not spooled (the lock was free), or our spool file was removed by hand
            seq = _row(conn, own[1], own[2], own[3], own[0])
    except BaseException as exc:
        dbconn.abort(conn, db_path, exc)
        raise
    dbconn.commit(conn, db_path)
    return seq


def _open(state: str, db: str) -> sqlite3.Connection | None:
    """The database connection when the file exists at the current schema, else None (the
    caller's full path creates or migrates it)."""
    dbconn.check_paths(state, db)
    try:
        os.lstat(db)
    except FileNotFoundError:
        return None
    dbconn.prepare_file(db)
    conn = dbconn.open_connection(db)
    try:
        current = dbconn.schema_version(conn) == dbconn.SCHEMA_VERSION
    except sqlite3.Error as exc:
        conn.close()
        raise dbconn.translate(db, exc) from exc
    if current:
        return conn
    conn.close()
    return None


def append(kind: str, key: str, payload: str, env: Mapping[str, str] | None = None, *,
           fallback: Callable[[str, str, str, str], int]) -> int:
    """``fm wake append KIND KEY PAYLOAD`` for the home *env* names: the new row's sequence.

    ``fallback(root, kind, key, payload)`` appends through the full store when this path cannot
    (see the module docstring); it rings the doorbell itself.
    """
    from firstmate.base import bell
    from firstmate.base.homeroot import find_root
    from firstmate.base.procself import current_fields
    from firstmate.base.safepaths import ensure_home
    from firstmate.base.wakeinput import validate

    kind, key, payload = validate(kind, key, payload)  # before touching the home: nothing written
    env = os.environ if env is None else env
    root = find_root(env)
    if ensure_home(root):
        from firstmate.base.homeroot import announce_created

        announce_created(root, env)  # rows appended where nobody watches must not go unnoticed
    state = os.path.join(root, "state")
    db = os.path.join(state, "firstmate.db")
    conn = _open(state, db) if os.name == "posix" and current_fields() is not None else None
    if conn is None:
        return fallback(root, kind, key, payload)
    seq = commit(conn, db, os.path.join(state, "queue.lock"), root, kind, key, payload)
    bell.ring_address(bell.address_of(state))
    return seq


__all__ = ["append", "commit", "commit_locked", "insert"]
