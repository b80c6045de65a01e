"""The wake queue as each actor sees it: the rows an actor could present or retire (a live
branch grant reserves its rows), and one consistent read-only snapshot for ``fm status`` and
``fm wake query``.

The counts themselves are plain functions in :mod:`firstmate.base.queueview` (``fm status``
calls them without attrs); this module wraps them in :class:`QueueStatus`.
"""

from __future__ import annotations

import sqlite3

import attrs

from firstmate.base import queueview
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
        return {
            "depth": self.depth, "last_seq": self.last_seq,
            "oldest": None if self.oldest is None else self.oldest.to_json(),
            "pending": {"main": self.pending_main, "branch": self.pending_branch},
            "unusable": self.unusable,
            **queueview.episode_json(episodes.plain(self.episode)),
            "grant": self.grant,
        }


def query(db: Store) -> QueueStatus:
    """A consistent read-only snapshot for `fm wake query` and `fm status`."""
    from firstmate.store import grants

    with db.reading() as conn:
        grant = grants.read(conn)
        info: dict[str, object] | None = None
        if grant is not None:
            info = {**grant.to_json(), "owner": grants.owner_state(grant),
                    "rows": queueview.reserved(conn)}
        return QueueStatus(
            depth=depth(conn), last_seq=last_seq(conn), oldest=oldest(conn),
            pending_main=pending_count(conn, "main"), pending_branch=pending_count(conn, "branch"),
            unusable=unusable_count(conn), episode=episodes.read(conn), grant=info,
        )


__all__ = ["QueueStatus", "pending_count", "query"]
