"""The wake queue as ``fm status`` and ``fm wake query`` report it, as plain values over a
connection: depth, the last sequence number, the oldest usable row, what each actor could
present, the unusable rows, the episode and the branch grant.

The one implementation: :mod:`firstmate.store.queuestatus` builds its ``QueueStatus`` from these
(asking psutil for a grant's owner where ``/proc`` cannot tell, and reading an undecodable oldest
row carefully); ``fm status`` calls them directly. Every function reads only, inside the caller's read transaction.
"""

from __future__ import annotations

from firstmate.base.dbconn import last_seq
from firstmate.base.wakeinput import KINDS
from firstmate.fast import episoderow
from firstmate.fast.wakeactor import VALID_SQL

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate.base.dbconn import sqlite3


#: (seq, at, kind, key, payload): one usable wake row.
Row = tuple[int, float, str, str, str]
#: (owner_pid, identity, generation, activated_at, published): the branch grant's row.
GrantRow = tuple[int, str, str, float, bool]


def depth(conn: sqlite3.Connection) -> int:
    """Every queued row, usable or not."""
    return int(conn.execute("SELECT count(*) FROM wakes").fetchone()[0])


def unusable_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute(f"SELECT count(*) FROM wakes WHERE NOT {VALID_SQL}").fetchone()[0])


def usable(seq: object, at: object, kind: object, key: object, payload: object) -> Row | None:
    """The row when its decoded fields are usable, else None."""
    if (
        isinstance(seq, int) and seq > 0
        and isinstance(at, int | float)
        and kind in KINDS
        and isinstance(key, str) and key.strip()
        and isinstance(payload, str)
    ):
        return seq, float(at), str(kind), key, payload
    return None


def oldest(conn: sqlite3.Connection) -> Row | None:
    """The usable row with the lowest sequence. Raises ``sqlite3.OperationalError`` (a decode
    error) when its text is not UTF-8: the store's careful scan judges that row."""
    found = conn.execute(
        f"SELECT seq, at, kind, key, payload FROM wakes WHERE {VALID_SQL} AND seq = "
        f"(SELECT min(seq) FROM wakes WHERE {VALID_SQL}) ORDER BY seq").fetchone()
    return None if found is None else usable(*found)


def row_json(row: Row) -> dict[str, object]:
    """A row as ``--json`` shows it (``WakeRow.to_json``)."""
    from firstmate.base.wakeinput import clean

    seq, at, kind, key, payload = row
    return {"seq": seq, "at": at, "kind": kind, "key": clean(key), "payload": clean(payload)}


def pending(conn: sqlite3.Connection, actor: str, live_grant: bool) -> int:
    """Rows *actor* could itself present or retire, given whether a live grant exists.

    branch: the rows in the live grant. main: every row not reserved by a live grant, unusable
    rows included (a main drain retires those).
    """
    if actor == "branch":
        if not live_grant:
            return 0
        return int(conn.execute(
            f"SELECT count(*) FROM wakes WHERE claim = 'branch' AND {VALID_SQL}").fetchone()[0])
    if live_grant:
        return int(conn.execute(
            f"SELECT count(*) FROM wakes WHERE NOT (coalesce(claim, '') = 'branch' AND {VALID_SQL})"
        ).fetchone()[0])
    return depth(conn)


def grant(conn: sqlite3.Connection) -> GrantRow | None:
    """The branch grant's row, or None when there is none."""
    row = conn.execute(
        "SELECT owner_pid, identity, generation, activated_at, published_at FROM branch_grant "
        "WHERE id = 1"
    ).fetchone()
    if row is None:
        return None
    return int(row[0]), str(row[1]), str(row[2]), float(row[3]), row[4] is not None


def grant_json(row: GrantRow) -> dict[str, object]:
    owner_pid, identity, generation, activated_at, published = row
    return {"owner_pid": owner_pid, "identity": identity, "generation": generation,
            "activated_at": activated_at, "published": published}


def reserved(conn: sqlite3.Connection) -> list[int]:
    """The sequence numbers the grant currently reserves, ascending."""
    return [int(r[0]) for r in conn.execute(
        "SELECT seq FROM wakes WHERE claim = 'branch' ORDER BY seq")]


def episode_json(state: episoderow.State) -> dict[str, object]:
    """The episode's ``episode`` token and ``episode_state`` as ``--json`` shows them."""
    return {"episode": ":".join(state) if isinstance(state, tuple) else None,
            "episode_state": ("valid" if isinstance(state, tuple)
                              else "invalid" if isinstance(state, str) else "missing")}


def grant_info(conn: sqlite3.Connection, row: GrantRow, owner_state: str | None
               ) -> dict[str, object]:
    """The grant as ``--json`` shows it: its row, its owner's state and the rows it reserves."""
    return {**grant_json(row), "owner": owner_state, "rows": reserved(conn)}


def status_dict(depth: int, last_seq: int, oldest: Row | None, pending_main: int,
                pending_branch: int, unusable: int, episode: episoderow.State,
                grant: dict[str, object] | None) -> dict[str, object]:
    """The queue as ``fm status --json`` and ``fm wake query --json`` show it."""
    return {
        "depth": depth, "last_seq": last_seq,
        "oldest": None if oldest is None else row_json(oldest),
        "pending": {"main": pending_main, "branch": pending_branch},
        "unusable": unusable,
        **episode_json(episode),
        "grant": grant,
    }


def status_json(conn: sqlite3.Connection, owner_state: str | None, *,
                oldest_row: Row | None, episode: episoderow.State,
                grant_row: GrantRow | None) -> dict[str, object]:
    """:func:`status_dict` read from *conn*: *owner_state* is the grant owner's (``live``,
    ``gone`` or ``unknown``; None without a grant)."""
    live = grant_row is not None and owner_state != "gone"
    return status_dict(depth(conn), last_seq(conn), oldest_row, pending(conn, "main", live),
                       pending(conn, "branch", live), unusable_count(conn), episode,
                       None if grant_row is None else grant_info(conn, grant_row, owner_state))


__all__ = ["VALID_SQL", "GrantRow", "Row", "depth", "episode_json", "grant", "grant_info",
           "grant_json", "oldest", "pending", "reserved", "row_json", "status_dict", "status_json",
           "unusable_count", "usable"]
