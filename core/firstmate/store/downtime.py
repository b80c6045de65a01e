"""Downtime made visible the moment a watcher is proven gone, by whoever sees it first.

A watcher marks its cycle open (``kv`` ``watch.open`` = its identity) and clears the mark when
it closes, publishing downtime itself on any close without a delivery. One killed outright
(SIGKILL, OOM) cannot: until now its downtime was published only by the next watcher's start,
so ``fm status``, the guards and the away brief said "episode: none" while nothing watched.
:func:`publish_if_gone` closes that gap: any arm, hook or status read that finds the open mark
naming a process that no longer runs publishes the downtime and clears the mark, under the
queue lock, exactly as the dead watcher's own close would have.
"""

from __future__ import annotations

import contextlib

from firstmate.store.database import Store
from firstmate.store.home import Home

#: The identity of the watcher whose cycle is open (cleared by its close).
OPEN_KEY = "watch.open"
#: How long a reader waits for the queue lock before leaving the publication to someone else.
LOCK_BOUND = 2.0


def proven_gone(token: str) -> bool:
    """The process *token* names is verifiably no longer running (its pid is dead or reused)."""
    from firstmate.store.identity import ProcessIdentity, matches

    ident = ProcessIdentity.parse(token)
    return ident is not None and not matches(ident)


def publish_if_gone(db: Store, *, bound: float = LOCK_BOUND) -> bool:
    """Publish downtime when the open cycle's watcher is proven gone; True when this call did.
    Best effort: a busy queue lock or an unwritable store leaves it to the next reader or to
    the next watcher's start."""
    from firstmate.base.errors import FirstmateError
    from firstmate.store import episodes, queue
    from firstmate.store.database import kv_get, kv_set

    with contextlib.suppress(FirstmateError, OSError):
        with db.reading() as conn:
            token = (kv_get(conn, OPEN_KEY) or "").strip()
        if not token or not proven_gone(token):
            return False
        with queue.locked(db, timeout=bound) as conn:
            if (kv_get(conn, OPEN_KEY) or "").strip() != token:
                return False  # closed, or a new cycle opened, meanwhile
            episodes.publish_downtime(conn)
            kv_set(conn, OPEN_KEY, "")
        return True
    return False


def publish_for(home: Home) -> bool:
    """:func:`publish_if_gone` for *home*'s store, when it has one (a reader's entry point)."""
    if not home.db.is_file():
        return False
    db = Store(home)
    try:
        return publish_if_gone(db)
    finally:
        db.close()


__all__ = ["LOCK_BOUND", "OPEN_KEY", "proven_gone", "publish_for", "publish_if_gone"]
