"""Cycle links: which arm started or attached to which watcher (and whose successor that
watcher was), kept in the store's ``cycle_links`` table for take-overs, status and the tests."""

from __future__ import annotations

import time
from collections.abc import Sequence

import attrs

from firstmate.store.database import Store

#: Cycle links kept in the store.
LINKS_KEEP = 256


@attrs.frozen
class Link:
    """Which arm started or attached to which watcher (and whose successor that watcher was)."""

    arm_pid: int
    arm_identity: str
    origin: str
    watcher_pid: int
    watcher_identity: str
    predecessor_pid: int | None = None
    predecessor_identity: str | None = None
    predecessor_arm_pid: int | None = None


def record_link(db: Store, link: Link) -> None:
    with db.transaction(timeout=10.0) as conn:
        conn.execute(
            "INSERT INTO cycle_links (at, arm_pid, arm_identity, origin, watcher_pid, "
            "watcher_identity, predecessor_pid, predecessor_identity, predecessor_arm_pid) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (time.time(), link.arm_pid, link.arm_identity, link.origin, link.watcher_pid,
             link.watcher_identity, link.predecessor_pid, link.predecessor_identity,
             link.predecessor_arm_pid),
        )
        conn.execute("DELETE FROM cycle_links WHERE id <= (SELECT max(id) FROM cycle_links) - ?",
                     (LINKS_KEEP,))


def started_link(db: Store, arm_pid: int) -> Link | None:
    """The newest cycle the arm *arm_pid* started, or None."""
    with db.reading() as conn:
        row = conn.execute(
            "SELECT arm_pid, arm_identity, origin, watcher_pid, watcher_identity, predecessor_pid,"
            " predecessor_identity, predecessor_arm_pid FROM cycle_links"
            " WHERE arm_pid = ? AND origin = 'started' ORDER BY id DESC LIMIT 1",
            (int(arm_pid),),
        ).fetchone()
    return None if row is None else _link(row)


def links(db: Store) -> list[Link]:
    """Every kept link, oldest first."""
    with db.reading() as conn:
        rows = conn.execute(
            "SELECT arm_pid, arm_identity, origin, watcher_pid, watcher_identity, predecessor_pid,"
            " predecessor_identity, predecessor_arm_pid FROM cycle_links ORDER BY id"
        ).fetchall()
    return [_link(row) for row in rows]


def _link(row: Sequence[object]) -> Link:
    def opt_int(value: object) -> int | None:
        return int(value) if isinstance(value, int) else None

    return Link(int(str(row[0])), str(row[1]), str(row[2]), int(str(row[3])), str(row[4]),
                opt_int(row[5]), None if row[6] is None else str(row[6]), opt_int(row[7]))


__all__ = ["LINKS_KEEP", "Link", "links", "record_link", "started_link"]
