"""The open-cycle mark (``kv`` ``watch.open``) and the downtime a reader publishes when the
watcher it names is proven gone, as plain functions over a connection.

:mod:`firstmate.store.downtime` explains why any reader publishes. :func:`publish_if_gone` is
the one implementation: read the mark, judge its watcher from ``/proc`` (or by the caller's
*gone*), and publish under the queue lock, taken with ``flock`` (the POSIX primitive, as ``fm
wake append`` takes it); ``fm status`` calls it directly and the store wraps it, deciding with
psutil where ``/proc`` cannot tell and locking through portalocker off POSIX. The transition
itself is :func:`publish_locked`, run inside the lock and a write transaction.
"""

from __future__ import annotations

import os
import time

from firstmate.base import dbconn
from firstmate.base.dbconn import sqlite3
from firstmate.fast import episoderow

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

#: The identity of the watcher whose cycle is open (cleared by its close).
OPEN_KEY = "watch.open"
#: How long a reader waits for the queue lock before leaving the publication to someone else.
LOCK_BOUND = 2.0


def open_mark(conn: sqlite3.Connection) -> str:
    """The identity token of the watcher whose cycle is open; "" when none is."""
    return (dbconn.kv_get(conn, OPEN_KEY) or "").strip()


def publish_locked(conn: sqlite3.Connection, token: str) -> bool:
    """Holding the queue lock and a write transaction: publish downtime and clear the mark,
    unless the mark no longer names *token* (closed, or a new cycle opened meanwhile)."""
    if open_mark(conn) != token:
        return False
    episoderow.publish_downtime(conn)
    dbconn.kv_set(conn, OPEN_KEY, "")
    return True


def gone_by_proc(token: str) -> bool | None:
    """The watcher *token* names is proven gone (True), runs (False), or ``/proc`` cannot tell
    (None); a malformed token names nobody to publish for (False)."""
    from firstmate.base import proctoken

    fields = proctoken.parse(token)
    if fields is None:
        return False
    running = proctoken.running(fields)
    return None if running is None else not running


def publish_if_gone(conn: sqlite3.Connection, db: str, root: str, *,
                    gone: Callable[[str], bool | None] = gone_by_proc,
                    locked: Callable[[str], bool] | None = None,
                    bound: float = LOCK_BOUND) -> bool | None:
    """Publish the downtime of the open cycle's watcher when *gone* proves it gone, under the
    queue lock (taken with ``flock`` within *bound* seconds; *locked*, given the token, takes
    it another way and runs :func:`publish_locked`). True: this call published. False: it did
    not (no cycle is open, its watcher runs, or a busy lock or an unwritable store left it to
    the next reader: best effort). None: *gone* could not tell (the caller may ask psutil). An
    SQLite error while reading the mark is raised."""
    conn.execute("BEGIN DEFERRED")
    try:
        token = open_mark(conn)
    finally:
        dbconn.end_read(conn)
    if not token:
        return False
    proven = gone(token)
    if not proven:
        return proven
    if locked is not None:
        return locked(token)
    return _flocked(conn, db, root, token, bound)


def _flocked(conn: sqlite3.Connection, db: str, root: str, token: str, bound: float) -> bool:
    """:func:`publish_locked` under the queue lock taken with ``flock`` (POSIX)."""
    from firstmate.base import ownerlock
    from firstmate.base.errors import FirstmateError

    state = os.path.dirname(db)
    started = time.monotonic()
    try:
        fd = ownerlock.try_acquire(os.path.join(state, "queue.lock"), "queue", root, bound)
        if fd is None:
            return False
        try:
            left = max(0.5, bound - (time.monotonic() - started))
            dbconn.start(conn, db, left)
            try:
                done = publish_locked(conn, token)
            except BaseException as exc:
                dbconn.abort(conn, db, exc)
                raise
            dbconn.commit(conn, db)
            return done
        finally:
            ownerlock.release(fd)
    except (FirstmateError, OSError):
        return False


__all__ = ["LOCK_BOUND", "OPEN_KEY", "gone_by_proc", "open_mark", "publish_if_gone",
           "publish_locked"]
