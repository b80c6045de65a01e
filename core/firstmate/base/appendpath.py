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
    """
    from firstmate.base import ownerlock

    fd = ownerlock.acquire_recorded(lock_path, "queue", root, token)[0]
    try:
        return _transact(conn, db_path, kind, key, payload, at)
    finally:
        ownerlock.release(fd)


def _transact(conn: sqlite3.Connection, db_path: StrPath, kind: str, key: str, payload: str,
              at: float | None) -> int:
    dbconn.start(conn, db_path)
    try:
        seq = insert(conn, kind, key, payload, at)
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
    root = find_root(os.environ if env is None else env)
    ensure_home(root)
    state = os.path.join(root, "state")
    db = os.path.join(state, "firstmate.db")
    conn = _open(state, db) if os.name == "posix" and current_fields() is not None else None
    if conn is None:
        return fallback(root, kind, key, payload)
    seq = commit(conn, db, os.path.join(state, "queue.lock"), root, kind, key, payload)
    bell.ring_address(bell.address_of(state))
    return seq


__all__ = ["append", "commit", "insert"]
