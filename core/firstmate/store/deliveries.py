"""The terminal-delivery ledger: which reason line each watcher printed before it closed.

Before a watcher releases its singleton it records ``(pid, identity token, reason)`` here. An
attached arm that lost sight of the watcher's stdout resolves the cycle by finding the record
whose pid *and* identity match the watcher it followed; a recycled pid or an unrelated queue
producer can never satisfy that match. The ledger keeps the newest
:data:`~firstmate.store.database.DELIVERIES_KEEP` records.
"""

from __future__ import annotations

import sqlite3
import time

import attrs

from firstmate.store.database import DELIVERIES_KEEP, Store

#: Longest reason kept, in characters.
REASON_MAX = 4096


@attrs.frozen
class Delivery:
    at: float
    watcher_pid: int
    identity: str
    reason: str


def record_locked(conn: sqlite3.Connection, watcher_pid: int, identity: str, reason: str) -> None:
    """Append one record inside the caller's write transaction (and trim to the newest 64)."""
    from firstmate.store.queue import clean

    conn.execute(
        "INSERT INTO deliveries (at, watcher_pid, identity, reason) VALUES (?, ?, ?, ?)",
        (time.time(), int(watcher_pid), clean(identity, 256), clean(reason, REASON_MAX)),
    )
    conn.execute(
        "DELETE FROM deliveries WHERE id <= (SELECT max(id) FROM deliveries) - ?",
        (DELIVERIES_KEEP,),
    )


def record(db: Store, watcher_pid: int, identity: str, reason: str, *, timeout: float | None = None) -> None:
    """Record a delivered reason in its own transaction (*timeout* bounds the write-lock wait)."""
    with db.transaction(timeout=timeout) as conn:
        record_locked(conn, watcher_pid, identity, reason)


def find(conn: sqlite3.Connection, watcher_pid: int, identity: str) -> Delivery | None:
    """The newest record for exactly this watcher (pid and identity), or None."""
    row = conn.execute(
        "SELECT at, watcher_pid, identity, reason FROM deliveries "
        "WHERE watcher_pid = ? AND identity = ? ORDER BY id DESC LIMIT 1",
        (int(watcher_pid), identity),
    ).fetchone()
    return None if row is None else Delivery(float(row[0]), int(row[1]), str(row[2]), str(row[3]))


def successor_since(conn: sqlite3.Connection, since: float, exclude: int) -> Delivery | None:
    """The first record of a watcher that *started* at or after *since* (a successor of the
    watcher that closed then), other than *exclude*: how an arm that was waiting for a successor
    learns the reason of one that came and closed before it looked."""
    from firstmate.store.identity import ProcessIdentity

    rows = conn.execute(
        "SELECT at, watcher_pid, identity, reason FROM deliveries WHERE at >= ? "
        "AND watcher_pid != ? ORDER BY id ASC", (since, int(exclude))).fetchall()
    for at, pid, identity, reason in rows:
        ident = ProcessIdentity.parse(str(identity))
        if ident is not None and ident.pid == int(pid) and ident.started > since:
            return Delivery(float(at), int(pid), str(identity), str(reason))
    return None


def recent(conn: sqlite3.Connection, limit: int = DELIVERIES_KEEP) -> list[Delivery]:
    """The newest records first."""
    return [
        Delivery(float(r[0]), int(r[1]), str(r[2]), str(r[3]))
        for r in conn.execute(
            "SELECT at, watcher_pid, identity, reason FROM deliveries ORDER BY id DESC LIMIT ?",
            (int(limit),),
        )
    ]


__all__ = ["REASON_MAX", "Delivery", "find", "recent", "record", "record_locked"]
