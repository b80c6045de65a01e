"""What a plugin's tests arrange in a home before they run a hook, through core's own writers,
so they set state up without importing core's store: a re-arm claim planted for a process of
the test's own (and committed as its owner would), the time of the last paced claim, the
watcher lock held by the test, a wake queued, and an announced wake episode with a row queued
behind the append path's back. :mod:`firstmate.testing.state` reads what a hook left."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3
    import subprocess
    from collections.abc import Iterator

    from firstmate.api import Home


@contextlib.contextmanager
def _writing(home: Home) -> Iterator[sqlite3.Connection]:
    from firstmate.store.database import open_store

    db = open_store(home)
    try:
        with db.transaction() as conn:
            yield conn
    finally:
        db.close()


def plant_claim(home: Home, harness: str, owner: subprocess.Popen[Any], *,
                session_pid: int | None) -> dict[str, Any]:
    """Make *owner* (a live process the test started) take *harness*'s next re-arm claim in
    *home*, as a turn-end hook of the session *session_pid* would (a newer epoch supersedes any
    claim there). Returns the claim as :func:`firstmate.testing.state.claim` reads it
    (``epoch``, ``owner_pid``, …)."""
    import attrs

    from firstmate.continuity import claimledger
    from firstmate.testing.procs import exec_identity

    ident = exec_identity(owner)  # (not the forking interpreter's, which never matches again)
    with _writing(home) as conn:
        entry = claimledger.claim_next(conn, harness, owner.pid, ident.token(),
                                       session_pid=session_pid)
    return attrs.asdict(entry)


def commit_claim(home: Home, harness: str, epoch: int, owner_pid: int, outcome: str) -> bool:
    """Record *outcome* (``wake``, ``failed``, …) for *harness*'s claim (*epoch*, *owner_pid*)
    as its owner does at the end of its cycle. False when a newer claim superseded it: a
    superseded owner can no longer record anything."""
    from firstmate.continuity import claimledger

    with _writing(home) as conn:
        return claimledger.commit(conn, harness, epoch, owner_pid, outcome)


def set_last_paced_claim(home: Home, harness: str, at: float) -> None:
    """Record *harness*'s last paced claim (a failed turn end's, e.g. Claude's StopFailure) as
    taken at *at* (seconds since the epoch), so the next paced claim first waits out its
    cooldown from then; :func:`firstmate.testing.state.pacing_left` reads the wait."""
    from firstmate.continuity import claimledger
    from firstmate.store.database import kv_set

    # The key claimpark.try_claim(paced=True) writes.
    with _writing(home) as conn:
        kv_set(conn, claimledger.key(harness, "stopfailure_at"), f"{at:.3f}")


@contextlib.contextmanager
def watcher_lock_held(home: Home, holder: str = "test-blocker") -> Iterator[None]:
    """Hold *home*'s watcher lock (the one-watcher singleton) as a live process that is no
    watcher, for the ``with`` block: every arm meanwhile fails to start a watcher. Raises at
    once when the lock is already held."""
    from firstmate.store.locks import FileLock

    lock = FileLock(home.lock_path("watch"), holder, home.root)
    lock.acquire(0)
    try:
        yield
    finally:
        lock.release()


def queue_wake(home: Home, kind: str, key: str, payload: str) -> int:
    """Queue a wake in *home* as ``fm wake append`` does (validated, with its downtime episode);
    returns the row's sequence number."""
    from firstmate.store import queue
    from firstmate.store.database import Store

    db = Store(home)
    try:
        return queue.append(db, kind, key, payload)
    finally:
        db.close()


def announced_episode_with_late_row(home: Home, payload: str = "late row") -> None:
    """Queue a wake in a fresh *home* and announce its episode as a (non-successor) watcher start does,
    then insert a row (sequence 99) behind the append path's back, so no new episode covers it:
    only a watcher start's reopen of the announced episode can see it. Raises AssertionError
    when the start does not announce the queued wake (a recovery)."""
    from firstmate.store import episodes

    queue_wake(home, "signal", "a", "first")
    with _writing(home) as conn:
        action = episodes.arm_check(conn, True)
        if action is not episodes.Action.RECOVER:
            raise AssertionError(f"a watcher start with a wake queued owes a recovery, "
                                 f"got {action}")
        conn.execute("INSERT INTO wakes (seq, at, kind, key, payload, claim) "
                     "VALUES (99, 1.0, 'signal', 'late', ?, NULL)", (payload,))


__all__ = ["announced_episode_with_late_row", "commit_claim", "plant_claim", "queue_wake",
           "set_last_paced_claim", "watcher_lock_held"]
