"""The wake queue as each actor sees it: the rows an actor could present or retire (a live
branch grant reserves its rows), and one consistent read-only snapshot for ``fm status`` and
``fm wake query``.

The counts and the JSON are plain functions in :mod:`firstmate.fast.queueview` (``fm status``
calls them without attrs); this module wraps them in :class:`QueueStatus`, judging a grant's
owner with psutil where ``/proc`` cannot tell.
"""

from __future__ import annotations

import sqlite3

import attrs

from firstmate.fast import queueview
from firstmate.store import episodes
from firstmate.store.database import Store, last_seq
from firstmate.store.queue import WakeRow, depth, oldest, unusable_count


def pending_count(conn: sqlite3.Connection, actor: str) -> int:
    """Rows *actor* could itself present or retire.

    branch: the rows in the live grant. main: every row not reserved by a live grant, unusable
    rows included (a main drain retires those).
    """
    from firstmate.store import grants

    return queueview.pending(conn, actor, grants.live_grant(conn) is not None)


@attrs.frozen
class QueueStatus:
    depth: int
    last_seq: int
    oldest: WakeRow | None
    pending_main: int
    pending_branch: int
    unusable: int
    episode: episodes.EpisodeState
    grant: dict[str, object] | None

    def to_json(self) -> dict[str, object]:
        oldest = self.oldest
        return queueview.status_dict(
            self.depth, self.last_seq,
            None if oldest is None else (oldest.seq, oldest.at, oldest.kind, oldest.key,
                                         oldest.payload),
            self.pending_main, self.pending_branch, self.unusable, episodes.plain(self.episode),
            self.grant)


def query(db: Store) -> QueueStatus:
    """A consistent read-only snapshot for `fm wake query` and `fm status`."""
    from firstmate.store import grants

    with db.reading() as conn:
        row = queueview.grant(conn)
        owner = None if row is None else grants.owner_state(grants.Grant(*row))
        live = row is not None and owner != "gone"
        return QueueStatus(
            depth=depth(conn), last_seq=last_seq(conn), oldest=oldest(conn),
            pending_main=queueview.pending(conn, "main", live),
            pending_branch=queueview.pending(conn, "branch", live),
            unusable=unusable_count(conn), episode=episodes.read(conn),
            grant=None if row is None else queueview.grant_info(conn, row, owner),
        )


__all__ = ["QueueStatus", "pending_count", "query"]
