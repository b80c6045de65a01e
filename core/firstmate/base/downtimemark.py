"""The open-cycle mark (``kv`` ``watch.open``) and the downtime a reader publishes when the
watcher it names is proven gone, as plain functions over a connection.

:mod:`firstmate.store.downtime` explains why any reader publishes, and holds the queue lock through
the store; ``fm status`` calls :func:`publish_if_gone` here, which takes the same lock with
``flock`` (the POSIX short-command primitive, as ``fm wake append`` does). Both run
:func:`publish_locked` inside the lock and a write transaction, so there is one transition.
"""

from __future__ import annotations

import os
import time

from firstmate.base import dbconn, episoderow
from firstmate.base.dbconn import sqlite3

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


def publish_if_gone(conn: sqlite3.Connection, db: str, root: str, token: str, *,
                    bound: float = LOCK_BOUND) -> bool:
    """Publish the downtime of the watcher *token* names (the caller proved it gone) under the
    queue lock, waiting at most *bound* seconds; True when this call did. POSIX only. Best
    effort: a busy lock or an unwritable store leaves it to the next reader (False)."""
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


__all__ = ["LOCK_BOUND", "OPEN_KEY", "open_mark", "publish_if_gone", "publish_locked"]
