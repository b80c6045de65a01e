"""Downtime made visible the moment a watcher is proven gone, by whoever sees it first.

A watcher marks its cycle open (``kv`` ``watch.open`` = its identity) and clears the mark when
it closes, publishing downtime itself on any close without a delivery. One killed outright
(SIGKILL, OOM) cannot: until now its downtime was published only by the next watcher's start,
so ``fm status``, the guards and the away brief said "episode: none" while nothing watched.
:func:`publish_if_gone` closes that gap: any arm, hook or status read that finds the open mark
naming a process that no longer runs publishes the downtime and clears the mark, under the
queue lock, exactly as the dead watcher's own close would have. That is
:func:`firstmate.fast.downtimemark.publish_if_gone`, which ``fm status``'s attrs-free path calls
directly; this module wraps it with psutil's answer where ``/proc`` cannot tell.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

from firstmate.fast import downtimemark
from firstmate.fast.downtimemark import LOCK_BOUND, OPEN_KEY
from firstmate.store.database import Store
from firstmate.store.home import Home


def proven_gone(token: str) -> bool:
    """The process *token* names is verifiably no longer running (its pid is dead or reused):
    ``/proc``'s answer, psutil's where it cannot tell (:func:`firstmate.store.identity.matches`)."""
    from firstmate.store.identity import ProcessIdentity, matches

    ident = ProcessIdentity.parse(token)
    return ident is not None and not matches(ident)


def publish_if_gone(db: Store, *, bound: float = LOCK_BOUND) -> bool:
    """Publish downtime when the open cycle's watcher is proven gone; True when this call did:
    :func:`firstmate.fast.downtimemark.publish_if_gone`, judged with psutil where ``/proc``
    cannot tell, and locked through the store off POSIX. Best effort: a busy queue lock or an
    unwritable store leaves it to the next reader or to the next watcher's start."""
    import sqlite3

    from firstmate.base.errors import FirstmateError

    def portable(token: str) -> bool:  # pragma: no cover - off POSIX
        from firstmate.store import queue

        with queue.locked(db, timeout=bound) as conn:
            return downtimemark.publish_locked(conn, token)

    with contextlib.suppress(FirstmateError, OSError, sqlite3.Error):
        return bool(downtimemark.publish_if_gone(
            db.connection(), str(db.path), str(db.home.root), gone=proven_gone,
            locked=None if os.name == "posix" else portable, bound=bound))
    return False


def publish_unwatched(db: Store, env: Mapping[str, str] | None = None, *,
                      bound: float = LOCK_BOUND) -> bool:
    """Publish downtime for a start that was stopped before it established supervision (a
    watcher stopped before its claim, an arm's child that ended or was killed before it), unless
    a watcher of this home holds the singleton: that one answers for its own cycle. True when
    this call published.

    The singleton is looked at under the queue lock: a watcher that claims meanwhile opens its
    cycle (under the same lock) after this publication and resurfaces it, and one that already
    opened it is seen. A home without a database has never been supervised: nothing to
    announce. Best effort, like :func:`publish_if_gone`.
    """
    from firstmate.base.errors import FirstmateError
    from firstmate.store import episodes, queue
    from firstmate.store.health import watcher_health

    if not db.home.db.is_file():
        return False
    with contextlib.suppress(FirstmateError, OSError), queue.locked(db, timeout=bound) as conn:
        if watcher_health(db.home, env).verified:
            return False
        episodes.publish_downtime(conn)
        return True
    return False


def publish_unwatched_for(home: Home, env: Mapping[str, str] | None = None, *,
                          bound: float = LOCK_BOUND) -> bool:
    """:func:`publish_unwatched` for *home*'s store, when it has one."""
    if not home.db.is_file():
        return False
    db = Store(home)
    try:
        return publish_unwatched(db, env, bound=bound)
    finally:
        db.close()


def publish_for(home: Home) -> bool:
    """:func:`publish_if_gone` for *home*'s store, when it has one (a reader's entry point)."""
    if not home.db.is_file():
        return False
    db = Store(home)
    try:
        return publish_if_gone(db)
    finally:
        db.close()


__all__ = ["LOCK_BOUND", "OPEN_KEY", "proven_gone", "publish_for", "publish_if_gone",
           "publish_unwatched", "publish_unwatched_for"]
