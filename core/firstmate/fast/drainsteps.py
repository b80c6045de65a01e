"""What a drain and an acknowledgement do inside the queue lock and one write transaction, as
plain functions over a connection: the one implementation of the drain's logic, which both
paths run (the ``fm wake drain`` fast path, :mod:`firstmate.fast.drainpath`, and the store's,
:mod:`firstmate.store.drain`, which adds grants, unusable rows and its value classes).

**Presenting.** Once the actor's rows are claimed, :func:`present` opens (or reuses) the
recovery episode, moves it to handling and records what was presented; :func:`episode_only`
does the same for an open episode when no rows are queued. Both say, in plain words, what the
episode they found means (:func:`firstmate.fast.drainview.episode_note`). :func:`dedupe` picks
the rows shown, and :func:`line` is a row's fields as ``fm wake query`` shows them.

**What was presented** is kept in ``kv``: the highest row each actor was shown and the
generations the acknowledgement commands named (:func:`record`, :func:`presented_through`,
:func:`printed_generations`), so an acknowledgement can refuse what nobody was asked for; a
branch grant that gives its rows back forgets its actor's record (:func:`forget_presented`,
called by :mod:`firstmate.store.grants`).

**Acknowledging.** :func:`check` refuses, before anything is consumed, an acknowledgement
through rows nobody was shown; :func:`consume` deletes the actor's presented rows up to the
cutoff, retires the episode when no rows remain, and says what the caller must know: a notice
when something went otherwise than asked, else the one-line confirmation
(:func:`firstmate.fast.drainview.ack_line`: what was consumed, the episode, what is still
queued). The generation binds only the episode part. Rows the actor was shown and handled are
consumed whatever generation the command names: a generation no drain printed (mistyped, made
up) or an older printed one retires nothing, and the notice names the remedy, so handled rows
never come back because of a wrong episode name.
"""

from __future__ import annotations

from firstmate.base.dbconn import kv_get, kv_set
from firstmate.base.wakeinput import clean
from firstmate.fast import episoderow
from firstmate.fast.wakeactor import VALID_SQL, ack_command

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import TypeVar

    from firstmate.base.dbconn import sqlite3

    T = TypeVar("T")

#: What an acknowledgement needs, ``(through, generation, command)``, and the episode's plain
#: note (:func:`firstmate.fast.drainview.episode_note`; None: nothing to say).
Presented = tuple[int, str, str, "str | None"]
#: What :func:`consume` did: rows deleted, episode retired, episode moved on, notices (stderr),
#: and the one-line confirmation (stdout; None when a notice says what happened instead).
Consumed = tuple[int, bool, bool, list[str], "str | None"]

#: kv: the highest row a drain presented to an actor (``drain.presented.main`` / ``.branch``).
PRESENTED_KEY = "drain.presented."
#: kv: the newest watcher delivery a main drain came after (``deliveries.id``): a handling
#: successor holds a wake while a newer delivery has had no drain (docs/watcher.md).
FOLLOWED_KEY = "drain.followed.main"
#: Seconds a drain whose output is out waits at most for the queue lock to record the delivery
#: it came after (:func:`follow`).
FOLLOW_BOUND = 2.0
#: kv: the generations drains named in acknowledgement commands, space-separated, newest last.
GENERATIONS_KEY = "drain.generations"
GENERATIONS_KEPT = 16


# --- what was presented ------------------------------------------------------------------------


def _mark(raw: str | None) -> int:
    return int(raw) if raw is not None and raw.isascii() and raw.isdigit() else 0


def presented_through(conn: sqlite3.Connection, actor: str) -> int:
    """The highest row a drain presented to *actor* (0: none yet). For main, every row it
    claims was presented (only its drain claims), which also covers a home whose rows were
    presented before this record existed."""
    mark = _mark(kv_get(conn, PRESENTED_KEY + actor))
    if actor == "main":
        row = conn.execute(
            f"SELECT coalesce(max(seq), 0) FROM wakes WHERE claim = 'main' AND {VALID_SQL}"
        ).fetchone()
        mark = max(mark, int(row[0]))
    return mark


_FOLLOWED_SQL = ("SELECT (SELECT coalesce(max(id), 0) FROM deliveries), "
                 "(SELECT value FROM kv WHERE key = ?)")


def _moved(conn: sqlite3.Connection) -> int | None:
    """The newest delivery when no main drain recorded it yet (else None)."""
    newest, recorded = conn.execute(_FOLLOWED_SQL, (FOLLOWED_KEY,)).fetchone()
    return None if recorded == str(newest) else int(newest)


def followed(conn: sqlite3.Connection) -> bool:
    """In a write transaction, once a main drain's output was written and its crew-status
    marks advanced: remember the newest delivery it came after. True when that moved (a
    watcher holding a wake for this drain must look again: ring it)."""
    newest = _moved(conn)
    if newest is None:
        return False
    kv_set(conn, FOLLOWED_KEY, str(newest))
    return True


def follow(conn: sqlite3.Connection, db: str, state: str, root: str, bound: float) -> None:
    """After a main drain's output was written and its crew-status marks advanced: record the
    delivery it came after (:func:`followed`, its own transaction under the queue lock) and,
    when that moved, ring the doorbell. Recorded only then, so a handling successor that looks
    again finds what the drain presented seen, rows and lines alike. Best effort: a drain that
    cannot record it (the lock held past *bound*, at most :data:`FOLLOW_BOUND`, or a failing
    database) leaves a held wake to go out when the hold runs out, so nothing is lost."""
    import os

    from firstmate.base import dbconn, ownerlock
    from firstmate.base.errors import FirstmateError

    bound = min(bound, FOLLOW_BOUND)  # (the drain's output is already out: never wait long)
    try:
        # Most drains come after a delivery a drain already followed: one read, no lock.
        if _moved(conn) is None:
            return
        lock = ownerlock.try_acquire(os.path.join(state, "queue.lock"), "queue", root, bound)
    except (dbconn.sqlite3.Error, OSError, FirstmateError):
        return
    if lock is None:
        return
    try:
        dbconn.begin(conn, db, bound)
        try:
            moved = followed(conn)
        except BaseException:
            try:  # noqa: SIM105 - contextlib costs the fast path an import
                conn.execute("ROLLBACK")
            except dbconn.sqlite3.Error:
                pass
            raise
        dbconn.commit(conn, db)
    except (dbconn.sqlite3.Error, OSError, FirstmateError):
        return
    finally:
        ownerlock.release(lock)
    if moved:  # a handling successor may hold a wake for this drain (docs/watcher.md)
        from firstmate.fast import bell

        bell.ring_address(bell.address_of(state))


def forget_presented(conn: sqlite3.Connection, actor: str) -> None:
    """Rows given back (a grant released or dropped) must be presented again before an
    acknowledgement may take them."""
    conn.execute("DELETE FROM kv WHERE key = ?", (PRESENTED_KEY + actor,))


def printed_generations(conn: sqlite3.Connection) -> list[str]:
    return (kv_get(conn, GENERATIONS_KEY) or "").split()


def record(conn: sqlite3.Connection, actor: str, through: int, generation: str) -> None:
    """Remember what this drain presented and the generation its command named."""
    if through > _mark(kv_get(conn, PRESENTED_KEY + actor)):
        kv_set(conn, PRESENTED_KEY + actor, str(through))
    known = printed_generations(conn)
    if known[-1:] != [generation]:
        known = [g for g in known if g != generation] + [generation]
        kv_set(conn, GENERATIONS_KEY, " ".join(known[-GENERATIONS_KEPT:]))


# --- presenting -------------------------------------------------------------------------------


def note(conn: sqlite3.Connection, actor: str, state: episoderow.State, through: int,
         shown: int) -> str | None:
    """What the episode *state* (before this drain moves it) means for the *shown* rows (up to
    *through*, claimed for *actor*), in plain words."""
    from firstmate.fast.drainview import episode_note

    oldest = None
    if shown and isinstance(state, tuple) and state[0] == "announced":
        oldest = conn.execute(f"SELECT min(at) FROM wakes WHERE claim = ? AND seq <= ? AND "
                              f"{VALID_SQL}", (actor, through)).fetchone()[0]
    return episode_note(state, shown, oldest)


def present(conn: sqlite3.Connection, actor: str, through: int, suffix: str,
            shown: int) -> Presented:
    """Rows up to *through* were claimed for *actor* (*shown* of them are shown, deduped): the
    episode they are handled under (a fresh downtime one when none is open) moves to
    handling, and the drain is recorded."""
    state = episoderow.read(conn)
    said = note(conn, actor, state, through, shown)
    if not isinstance(state, tuple) or state[0] == "acked":
        state = episoderow.publish_downtime(conn)
    episoderow.begin_handling(conn)
    generation = state[2]
    record(conn, actor, through, generation)
    return through, generation, ack_command(through, generation, suffix), said


def episode_only(conn: sqlite3.Connection, actor: str, suffix: str) -> Presented | None:
    """No rows: an open episode still needs its generation-bound acknowledgement (None: no
    episode is open, nothing to acknowledge)."""
    state = episoderow.read(conn)
    if not isinstance(state, tuple) or state[0] == "acked":
        return None
    said = note(conn, actor, state, 0, 0)
    if state[1] == "downtime":
        episoderow.begin_handling(conn)
    record(conn, actor, 0, state[2])
    return 0, state[2], ack_command(0, state[2], suffix), said


def dedupe(rows: Iterable[tuple[str, str, T]]) -> list[T]:
    """One row per (kind, key), in first-seen order, showing the last row; heartbeats collapse.
    *rows* are ``(kind, key, row)``."""
    view: dict[tuple[str, str], T] = {}
    for kind, key, row in rows:
        view[("heartbeat", "") if kind == "heartbeat" else (kind, key)] = row
    return list(view.values())


def line(seq: int, kind: str, key: str, payload: str) -> str:
    """A row's fields, ``<seq>\\t<kind>\\t<key>\\t<payload>``, each on one line (``fm wake
    query``'s oldest row; a drain shows rows as :mod:`firstmate.fast.drainview` words them)."""
    return f"{seq}\t{clean(kind)}\t{clean(key)}\t{clean(payload)}"


# --- acknowledging ----------------------------------------------------------------------------


def _open(state: episoderow.State) -> bool:
    return isinstance(state, tuple) and state[0] != "acked"


def remedy(conn: sqlite3.Connection, actor: str, through: int, suffix: str) -> str:
    """What to run instead: the exact acknowledgement when this actor still has presented rows
    and the current episode is the one the last drain named, else a fresh drain."""
    state = episoderow.read(conn)
    waiting = conn.execute(
        f"SELECT count(*) FROM wakes WHERE claim = ? AND seq <= ? AND {VALID_SQL}",
        (actor, through),
    ).fetchone()[0]
    if (isinstance(state, tuple) and _open(state) and waiting
            and printed_generations(conn)[-1:] == [state[2]]):
        return f"run {ack_command(through, state[2], suffix)} after handling it"
    return f"re-run fm wake drain{suffix} and use the WAKE_ACK_REQUIRED command it prints"


def check(conn: sqlite3.Connection, actor: str, cutoff: int, suffix: str) -> None:
    """Refuse (:class:`~firstmate.base.errors.UsageError`), before anything is consumed, an
    acknowledgement through rows nobody was shown."""
    from firstmate.base.errors import UsageError

    last = presented_through(conn, actor)
    if cutoff > last:
        raise UsageError(
            f"wake drain: --ack-through {cutoff} is beyond the last wake row presented to you "
            f"({last or 'none'}); nothing was acknowledged: {remedy(conn, actor, last, suffix)}"
        )


def consume(conn: sqlite3.Connection, actor: str, cutoff: int, generation: str,
            suffix: str) -> Consumed:
    """Delete *actor*'s presented rows at or below *cutoff*; retire the episode of *generation*
    when it is still the open one and no rows remain."""
    row = conn.execute(
        f"SELECT coalesce(max(seq), 0) FROM wakes WHERE claim = ? AND {VALID_SQL}", (actor,)
    ).fetchone()
    presented_max = int(row[0])
    # Only rows presented to this actor: a row appended since its drain (unowned, or handed
    # back by a grant) waits for the next drain, whatever the cutoff.
    others = conn.execute(
        "SELECT count(*) FROM wakes WHERE claim IS NOT ? OR seq > ?", (actor, cutoff)
    ).fetchone()[0]
    if not others and not conn.execute(
            f"SELECT count(*) FROM wakes WHERE NOT {VALID_SQL}").fetchone()[0]:
        # Every queued row goes: SQLite empties the table whole instead of row by row.
        consumed = conn.execute("DELETE FROM wakes").rowcount
    else:
        consumed = conn.execute(
            f"DELETE FROM wakes WHERE claim = ? AND seq <= ? AND {VALID_SQL}", (actor, cutoff)
        ).rowcount
    remaining = int(conn.execute("SELECT count(*) FROM wakes").fetchone()[0])
    state = episoderow.read(conn)
    known = (isinstance(state, tuple) and state[2] == generation) or \
        generation in printed_generations(conn)
    retired = moved = False
    open_elsewhere = _open(state) and isinstance(state, tuple) and state[2] != generation
    if remaining == 0 and state is not None:
        retired = episoderow.acknowledge(conn, generation) != "mismatch"
        moved = not retired and (open_elsewhere or isinstance(state, str))
    else:
        moved = open_elsewhere
    state = episoderow.read(conn)
    notices: list[str] = []
    if consumed == 0 and presented_max > cutoff:
        head = (
            f"wake drain: nothing was acknowledged through {cutoff} (none of your presented wake"
            f" rows is at or below it); the current wake is row {presented_max}: "
        )
        if isinstance(state, tuple) and _open(state):
            notices.append(head + f"run {ack_command(presented_max, state[2], suffix)} after handling it")
        else:
            notices.append(head + f"re-run fm wake drain{suffix} and use the WAKE_ACK_REQUIRED command it prints")
    elif not known:
        # Never printed by a drain: the episode part is refused; the rows were still handled.
        head = (f"wake drain: acknowledged wakes through {cutoff} ({consumed} row(s) consumed), "
                f"but recovery generation {generation} was never printed by a drain (the current "
                f"episode is {episoderow.token(state)})")
        if isinstance(state, tuple) and _open(state):
            notices.append(head + ", so the episode stays open: "
                           + remedy(conn, actor, presented_max, suffix))
        else:
            notices.append(head + "; nothing to retire")
    elif (not retired and not moved and remaining == 0 and isinstance(state, tuple)
            and state[2] != generation):
        notices.append(
            f"wake drain: recovery generation {generation} is not the current episode "
            f"({episoderow.token(state)}); nothing more to retire"
        )
    elif moved:
        notices.append(
            f"wake drain: acknowledged wakes through {cutoff} ({consumed} row(s) consumed), but a "
            f"newer recovery episode is pending; re-run fm wake drain{suffix} and use the new "
            "WAKE_ACK_REQUIRED command"
        )
    said = None
    if not notices:
        from firstmate.fast.drainview import ack_line

        said = ack_line(cutoff, consumed, retired, remaining, state, suffix)
    return consumed, retired, moved, notices, said


def after(conn: sqlite3.Connection) -> tuple[int, str]:
    """The rows still queued and the episode's token (``status:kind:generation``, ``invalid``
    or ``none``), as an acknowledgement leaves them."""
    remaining = int(conn.execute("SELECT count(*) FROM wakes").fetchone()[0])
    return remaining, episoderow.token(episoderow.read(conn))


__all__ = ["FOLLOWED_KEY", "FOLLOW_BOUND", "GENERATIONS_KEPT", "GENERATIONS_KEY", "PRESENTED_KEY",
           "Consumed", "Presented", "after", "check", "consume", "dedupe", "episode_only", "follow",
           "followed", "forget_presented", "line", "note", "present", "presented_through",
           "printed_generations", "record", "remedy"]
