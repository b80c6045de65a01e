"""The supervision-branch grant: rows of the wake queue reserved for one live branch process.

A branch (a supervision branch or host) first *activates* a grant bound to its owner process
(pid + identity token + a generation it chose), then *publishes* the sequence numbers it will
present and acknowledge. Published rows are ``claim = 'branch'`` in the ``wakes`` table; main
never presents or acknowledges them while the grant's owner lives. A main drain or
acknowledgement reclaims a grant whose owner is gone (identity no longer matches); a branch drain
never reclaims (its sandbox may not be able to inspect the host pid).

Check rows are main-owned while the captain is attended: they are grantable only while the away
record (``state/away``) exists.

The verbs (:func:`activate`, :func:`publish`, :func:`withhold`, :func:`release`,
:func:`deactivate`) take the queue lock and a write transaction themselves. The helpers that take
a connection expect to run inside one.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Literal

import attrs

from firstmate.base.envnum import PID_MAX, decimal
from firstmate.base.errors import ConflictError, FirstmateError, UsageError
from firstmate.fast import queueview
from firstmate.store import episodes
from firstmate.store.database import Store, kv_get, kv_set

OwnerState = Literal["live", "gone", "unknown"]

#: Sequence numbers named in one HELD line before it says ``,...``.
HELD_SHOWN = 20
_WITHHELD_KEY = "grant.withheld_through"

USAGE = (
    "usage: fm wake grant activate PID GENERATION | publish GENERATION SEQUENCE... | withhold"
    " | release GENERATION | deactivate PID GENERATION"
)


@attrs.frozen
class Grant:
    owner_pid: int
    identity: str
    generation: str
    activated_at: float
    published: bool

    def to_json(self) -> dict[str, object]:
        return queueview.grant_json((self.owner_pid, self.identity, self.generation,
                                     self.activated_at, self.published))


def read(conn: sqlite3.Connection) -> Grant | None:
    row = queueview.grant(conn)
    return None if row is None else Grant(*row)


def owner_state(grant: Grant) -> OwnerState:
    """``live`` (identity matches), ``gone`` (dead or pid reused) or ``unknown`` (unreadable):
    :func:`firstmate.base.proctoken.owner_state`, psutil asked where ``/proc`` cannot tell."""
    from firstmate.base.proctoken import owner_state as by_proc
    from firstmate.store.identity import ProcessIdentity, identity_of, is_alive

    known = by_proc(grant.owner_pid, grant.identity)
    if known is not None:
        return known
    recorded = ProcessIdentity.parse(grant.identity)
    assert recorded is not None  # (a malformed token is "gone" above)
    live = identity_of(grant.owner_pid)
    if live is not None:
        return "live" if live.same_as(recorded) else "gone"
    # Running but unreadable (another user's process): we cannot prove it is gone.
    return "unknown" if is_alive(grant.owner_pid) else "gone"


#: The claim of a row a branch grant gave back (released, deactivated or reclaimed).
RETURNED = "returned"


def reserved(conn: sqlite3.Connection) -> list[int]:
    """The sequence numbers the grant currently reserves, ascending."""
    return queueview.reserved(conn)


def _clear(conn: sqlite3.Connection, *, drop_owner: bool) -> None:
    # Handed back, not unowned: main was never shown these rows, so its acknowledgement must not
    # claim them unseen; its next drain presents them (see drain.acknowledge_locked).
    conn.execute(f"UPDATE wakes SET claim = '{RETURNED}' WHERE claim = 'branch'")
    # What a branch drain presented goes back with the rows: the next branch must drain again
    # before its acknowledgement may take anything.
    from firstmate.fast.drainsteps import forget_presented

    forget_presented(conn, "branch")
    if drop_owner:
        conn.execute("DELETE FROM branch_grant")
    else:
        conn.execute("UPDATE branch_grant SET published_at = NULL")


def reclaim_if_gone(conn: sqlite3.Connection) -> Grant | None:
    """Main only: drop a grant whose owner is gone, returning its rows to the unowned pool."""
    grant = read(conn)
    if grant is None or owner_state(grant) != "gone":
        return None
    _clear(conn, drop_owner=True)
    return grant


def live_grant(conn: sqlite3.Connection) -> Grant | None:
    """The grant if its owner is live (or cannot be proven gone)."""
    grant = read(conn)
    if grant is None or owner_state(grant) == "gone":
        return None
    return grant


def held_line(seqs: Sequence[int]) -> str:
    shown = ",".join(str(s) for s in seqs[:HELD_SHOWN])
    if len(seqs) > HELD_SHOWN:
        shown += ",..."
    return (
        f"WAKE ROWS HELD BY SUPERVISION BRANCH: {len(seqs)} queued row(s) ({shown}) are granted"
        " to the live supervision branch, which presents and acknowledges them."
    )


def withhold_locked(conn: sqlite3.Connection) -> bool:
    """Rows the branch left unclaimed are owed to main: make the episode resurface them once."""
    row = conn.execute(
        "SELECT max(seq) FROM wakes WHERE claim IS NULL OR claim NOT IN ('main', 'branch')"
    ).fetchone()
    newest = int(row[0]) if row and row[0] is not None else 0
    raw = kv_get(conn, _WITHHELD_KEY)
    done = int(raw) if raw is not None and raw.isdigit() else 0
    if newest <= done:
        return False
    episodes.publish_downtime(conn, append=True)
    kv_set(conn, _WITHHELD_KEY, str(newest))
    return True


# --- verbs -----------------------------------------------------------------------------------


def _pid(value: int | str) -> int:
    pid = decimal(str(value), minimum=2, maximum=PID_MAX)
    if pid is None:
        text = str(value).strip()
        raise UsageError(f"wake grant: invalid owner pid {text[:40]!r}; pass the branch process pid")
    return pid


def _generation(value: str) -> str:
    if not episodes.valid_generation(value):
        raise UsageError(f"wake grant: invalid generation {value[:80]!r} (expected [A-Za-z0-9._-]+)")
    return value


def _ring(db: Store) -> None:
    from firstmate.store import doorbell

    doorbell.ring(db.home)


def activate(db: Store, pid: int | str, generation: str) -> Grant:
    """Bind a fresh grant (no rows yet) to the live process *pid* under *generation*."""
    from firstmate.store.identity import identity_of
    from firstmate.store.queue import locked

    owner, gen = _pid(pid), _generation(generation)
    before = identity_of(owner)
    if before is None:
        raise FirstmateError(
            f"wake grant: cannot read the identity of pid {owner} (is it running?); "
            "activate the grant from the live branch process"
        )
    with locked(db) as conn:
        now = identity_of(owner)
        if now is None or not now.same_as(before):
            raise FirstmateError(
                f"wake grant: pid {owner} exited or changed while activating; nothing was granted"
            )
        _clear(conn, drop_owner=True)
        grant = Grant(owner, before.token(), gen, time.time(), False)
        conn.execute(
            "INSERT INTO branch_grant (id, owner_pid, identity, generation, activated_at) "
            "VALUES (1, ?, ?, ?, ?)",
            (grant.owner_pid, grant.identity, grant.generation, grant.activated_at),
        )
    return grant


def _seqs(values: Sequence[int | str]) -> tuple[int, ...]:
    parsed = [decimal(str(v), minimum=1) for v in values]
    if not parsed or any(seq is None for seq in parsed):
        raise UsageError("wake grant: publish needs one or more positive decimal sequence numbers")
    seqs = tuple(seq for seq in parsed if seq is not None)
    if len(set(seqs)) != len(seqs):
        raise UsageError("wake grant: publish needs distinct sequence numbers")
    return seqs


def _owner_for(conn: sqlite3.Connection, generation: str) -> Grant:
    grant = read(conn)
    if grant is None:
        raise FirstmateError(
            f"wake grant: no grant is active (generation {generation}); run fm wake grant activate first"
        )
    if grant.generation != generation:
        raise FirstmateError(
            f"wake grant: the active grant is generation {grant.generation}, not {generation}; "
            "nothing was changed"
        )
    return grant


def publish(db: Store, generation: str, values: Sequence[int | str]) -> tuple[int, ...]:
    """Reserve the rows *values* for the grant of *generation* (idempotent for the same set)."""
    from firstmate.store.queue import VALID_SQL, locked

    gen = _generation(generation)
    seqs = _seqs(values)
    with locked(db) as conn:
        _owner_for(conn, gen)
        current = reserved(conn)
        if current and sorted(current) != sorted(seqs):
            raise FirstmateError(
                f"wake grant: generation {gen} already holds rows "
                f"{','.join(map(str, current))}; release it before publishing a different set"
            )
        if not current:
            found = {
                int(r[0]): (r[1], r[2])
                for r in conn.execute(
                    f"SELECT seq, claim, kind FROM wakes WHERE {VALID_SQL} AND seq IN "
                    f"({','.join('?' * len(seqs))})",
                    seqs,
                )
            }
            mains = [s for s in seqs if s in found and found[s][0] == "main"]
            if mains:
                raise ConflictError(
                    f"wake grant: main already claimed row(s) {','.join(map(str, mains))}; "
                    "publish only rows main has not presented"
                )
            away = db.home.away_record.exists()
            checks = [s for s in seqs if s in found and found[s][1] == "check"]
            if checks and not away:
                raise ConflictError(
                    f"wake grant: row(s) {','.join(map(str, checks))} are check rows, which main "
                    f"owns while attended (no away record at {db.home.away_record})"
                )
            missing = [s for s in seqs if s not in found]
            if missing:
                raise FirstmateError(
                    f"wake grant: row(s) {','.join(map(str, missing))} are not queued; "
                    "publish only rows the queue holds"
                )
            conn.executemany("UPDATE wakes SET claim = 'branch' WHERE seq = ?", [(s,) for s in seqs])
        conn.execute("UPDATE branch_grant SET published_at = ?", (time.time(),))
        withheld = withhold_locked(conn)
    if withheld:
        _ring(db)
    return seqs


def withhold(db: Store) -> bool:
    """The branch took a close and claimed nothing: surface the unclaimed rows to main once."""
    from firstmate.store.queue import locked

    with locked(db) as conn:
        withheld = withhold_locked(conn)
    if withheld:
        _ring(db)
    return withheld


def release(db: Store, generation: str) -> int:
    """Return the grant's remaining rows to the unowned pool; the owner record stays."""
    from firstmate.store.queue import locked

    gen = _generation(generation)
    with locked(db) as conn:
        _owner_for(conn, gen)
        count = len(reserved(conn))
        _clear(conn, drop_owner=False)
    return count


def deactivate(db: Store, pid: int | str, generation: str) -> int:
    """Drop the grant of (*pid*, *generation*) and return its rows to the unowned pool."""
    from firstmate.store.queue import locked

    owner, gen = _pid(pid), _generation(generation)
    with locked(db) as conn:
        grant = _owner_for(conn, gen)
        if grant.owner_pid != owner:
            raise FirstmateError(
                f"wake grant: the active grant belongs to pid {grant.owner_pid}, not {owner}; "
                "nothing was changed"
            )
        count = len(reserved(conn))
        _clear(conn, drop_owner=True)
    return count


__all__ = [
    "USAGE",
    "Grant",
    "OwnerState",
    "activate",
    "deactivate",
    "held_line",
    "live_grant",
    "owner_state",
    "publish",
    "read",
    "reclaim_if_gone",
    "release",
    "reserved",
    "withhold",
    "withhold_locked",
]
