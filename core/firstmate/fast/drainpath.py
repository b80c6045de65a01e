"""``fm wake drain`` and its acknowledgement for main, without the store: the fast path.

A plain drain or acknowledgement runs at the start of every handling turn, so in the common
state (main, a home at the current schema, no supervision grant, every row usable) it runs
here, over plain values, importing nothing outside the standard-library layer. It runs the
drain's one implementation, :mod:`firstmate.fast.drainsteps` (which
:func:`firstmate.store.drain.drain` / :func:`~firstmate.store.drain.acknowledge` run too) and,
for a drain, the crew-status presentation :mod:`firstmate.app.drain_context` runs
(:func:`firstmate.fast.crewview.present`), under the same locks (the queue lock ``state/queue.lock`` with
its owner record, and, for a drain, the presentation's ``state/status-presentation.lock``) and
prints the same bytes in the same order, through the one presentation both paths use
(:mod:`firstmate.fast.drainview`). The crews' status logs and drain cursors are read after the
commit, with the queue lock already released, as the full path reads them; the cursors advance
only once every line was written and flushed.

Each entry returns False, having changed and printed nothing, whenever it is not sure: a new
home or no database, another schema, a grant, a branch-claimed, unusable or undecodable row, an
invalid episode, a lock held by someone else (the drain; the full path then waits its bounded
wait and says so), a refused acknowledgement (the full path words the refusal), any SQLite
error, a crew directory that cannot be listed, or a turn-end row of a registered crew (its
screen is read through the crew backend, the full path's: no tmux here). The caller then runs
the full path, which handles every state. Crew files that cannot be read (a symlink, not a regular file, no
permission) do not hand over: both paths print ``STATUS PRESENTATION INCOMPLETE`` after the
rows and advance no cursor.
"""

from __future__ import annotations

import os

from firstmate.base import dbconn
from firstmate.base.dbconn import sqlite3
from firstmate.base.wakeinput import KINDS
from firstmate.fast import episoderow
from firstmate.fast.wakeactor import UNCLAIMED_SQL, VALID_SQL

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TextIO, TypeVar

    from firstmate.fast.crewview import Snapshot

    T = TypeVar("T")

#: The crew-status presentation's lock (:data:`firstmate.app.drain_context.LOCK_NAME`).
PRESENTATION_LOCK = "status-presentation"
#: A registered crew's pane file (:data:`firstmate.store.crew.PANE`).
CREW_PANE = ".pane"
#: A crew's turn-end marker, and the key of its signal row (:data:`firstmate.store.crew.TURN_ENDED`).
TURN_ENDED = ".turn-ended"


class _Fallback(Exception):
    """Not sure: undo (nothing was committed) and let the full path run."""


def _home(env: Mapping[str, str]) -> tuple[str, str, str] | None:
    """``(root, state, db)`` for an existing home and database, else None (after saying so
    when this call created the home, as the full path would)."""
    from firstmate.base.homemark import ensure_home
    from firstmate.base.homeroot import find_root
    from firstmate.base.procself import current_fields

    root = find_root(env)
    if ensure_home(root, env):
        from firstmate.base.homeroot import announce_created

        announce_created(root, env)
        return None
    state = os.path.join(root, "state")
    db = os.path.join(state, "firstmate.db")
    if os.name != "posix" or current_fields() is None:
        return None
    dbconn.check_paths(state, db)
    if not os.path.lexists(db):
        return None
    dbconn.prepare_file(db)
    return root, state, db


def _connect(db: str) -> sqlite3.Connection | None:
    conn = dbconn.open_connection(db)
    try:
        if dbconn.schema_version(conn) == dbconn.SCHEMA_VERSION:
            return conn
    except sqlite3.Error:
        pass
    conn.close()
    return None


def _crews(state: str) -> frozenset[str] | None:
    """The names crews may be registered under (their status is presented); None when the
    crew directory cannot be listed (the full path's job)."""
    try:
        names = os.listdir(os.path.join(state, "crew"))
    except FileNotFoundError:
        return frozenset()
    except OSError:
        return None
    return frozenset([name[: -len(CREW_PANE)] for name in names if name.endswith(CREW_PANE)])


def _presentation(state: str, env: Mapping[str, str],
                  rows: list[tuple[Any, ...]]) -> tuple[list[str], list[Snapshot]]:
    """After the drain's commit, under the presentation lock: the crew-status lines for the
    drained *rows* and the snapshot they were made from (:func:`firstmate.fast.crewview.present`)."""
    from firstmate.fast import crewview

    lines, snaps, _context = crewview.present(os.path.join(state, "crew"),
                                              env.get("FM_CAPTAIN_RE"),
                                              [(row[1], row[2], row[3]) for row in rows])
    return lines, snaps


def _no_grant(conn: sqlite3.Connection) -> None:
    """Inside the transaction: refuse a grant (main may reclaim it) or an invalid episode."""
    if (conn.execute("SELECT count(*) FROM branch_grant").fetchone()[0]
            or isinstance(episoderow.read(conn), str)):
        raise _Fallback


def _transact(conn: sqlite3.Connection, db: str, body: Callable[[sqlite3.Connection], T]) -> T:
    """``body(conn)`` in the open transaction: commit, or roll back and re-raise
    (:class:`_Fallback` for any SQLite error: the full path meets it again and reports it)."""
    try:
        result = body(conn)
    except BaseException as exc:
        try:  # noqa: SIM105 - contextlib costs the fast path an import
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        if isinstance(exc, sqlite3.Error):
            raise _Fallback from exc
        raise
    dbconn.commit(conn, db)
    return result


def drain(env: Mapping[str, str], out: TextIO, err: TextIO) -> bool:
    """``fm wake drain`` as main, printed to *out* / *err*; False: nothing done, run the full
    path."""
    from firstmate.base import ownerlock
    from firstmate.fast.wakeactor import lock_timeout, refuse_crew, skip_line

    refuse_crew(env)
    found = _home(env)
    if found is None:
        return False
    root, state, db = found
    presentation = ownerlock.try_acquire(os.path.join(state, PRESENTATION_LOCK + ".lock"),
                                         PRESENTATION_LOCK, root)
    if presentation is None:
        return False
    try:
        crews = _crews(state)
        if crews is None:
            return False
        conn = _connect(db)
        if conn is None:
            return False
        try:
            queue = ownerlock.try_acquire(os.path.join(state, "queue.lock"), "queue", root)
            if queue is None:
                return False
            try:
                bound = lock_timeout(env)
                try:
                    dbconn.begin(conn, db, float(bound))
                except Exception as exc:
                    from firstmate.base.errors import LockTimeout

                    if isinstance(exc, LockTimeout):
                        out.write(skip_line(None, bound) + "\n")
                        out.flush()
                        return True
                    raise
                # A registered crew's turn end is shown with its screen: the full path's.
                ended = frozenset([name + TURN_ENDED for name in crews])
                command, note, shown, kinds = _transact(conn, db,
                                                        lambda c: _drain_locked(c, ended))
            except _Fallback:
                return False
            finally:
                ownerlock.release(queue)
            # Read once the queue lock is free again (appends never wait on crews' logs).
            lines, snaps = _presentation(state, env, shown) if crews else ([], [])
            from firstmate.fast import drainview

            drainview.emit(out, err, shown, note=note, held=None, command=command, context=lines,
                           kinds=kinds)
            if snaps:
                from firstmate.fast import crewview

                # Only now, with the lines written and flushed, do they count as seen.
                crewview.advance(os.path.join(state, "crew"), snaps)
            from firstmate.fast import drainsteps

            drainsteps.follow(conn, db, state, root, float(bound))
            return True
        finally:
            _close(conn)
    finally:
        ownerlock.release(presentation)


def _close(conn: sqlite3.Connection) -> None:
    """Closed explicitly, never left to the process's end: the command may leave without its
    teardown (cli.main.leave_at_once), and the last connection's close checkpoints, so the
    database file is whole again once ``fm`` is idle."""
    try:  # noqa: SIM105 - contextlib costs the fast path an import
        conn.close()
    except sqlite3.Error:
        pass


_KINDS = frozenset(KINDS)
_TEXT = frozenset((str,))
#: What the drain needs of a row's ``at`` and ``claim``, as one small integer per row (cached
#: by the interpreter: no object made per row, where the columns themselves cost one each):
#: -1 for an ``at`` that is not a number (the full path retires the row), else 1 for a row
#: main claimed, 2 for one reserved for a grant, 0 for an unclaimed one (wakeactor.UNCLAIMED_SQL).
_FLAG_SQL = ("CASE WHEN typeof(at) NOT IN ('integer', 'real') THEN -1 WHEN claim = 'main' THEN 1"
             " WHEN claim = 'branch' THEN 2 ELSE 0 END")
_SCAN_CACHE_PAGES = 32
_MAIN = frozenset((1,))
_HANDED_OVER = frozenset((-1, 2))
_KEPT: list[object] = []


def _drain_locked(conn: sqlite3.Connection, ended: frozenset[str]
                  ) -> tuple[str | None, str | None, list[tuple[Any, ...]], set[str]]:
    """Claim and present main's rows: the acknowledgement command, if one is owed, the
    episode's plain note, the rows shown (deduped) and their kinds. A signal row keyed by one
    of *ended* (a registered crew's turn end) is the full path's."""
    import gc

    from firstmate.fast import drainsteps

    _no_grant(conn)
    # Tens of thousands of fresh tuples and strings, none in a cycle: the collector would only
    # walk them again and again while they are made.
    collecting = gc.isenabled()
    gc.disable()
    try:
        # A scan reads each page once: with a small page cache a fresh process reuses a few
        # page buffers instead of faulting in one per page of the table. (The default comes
        # back before an update, which may dirty every page.)
        cache = conn.execute("PRAGMA cache_size").fetchone()[0]
        conn.execute(f"PRAGMA cache_size = {_SCAN_CACHE_PAGES}")
        # (undecodable text raises here: an SQLite error, so the full path retires the row)
        rows = conn.execute(
            f"SELECT seq, kind, key, payload, {_FLAG_SQL} FROM wakes ORDER BY seq").fetchall()
        conn.execute(f"PRAGMA cache_size = {int(cache)}")
        if not rows:
            presented = drainsteps.episode_only(conn, "main", "")
            return (None, None, [], set()) if presented is None else (
                presented[2], presented[3], [], set())
        flags, shown, kinds = _lines(rows, ended)
        # Kept, not freed: ``fm wake drain`` leaves without its teardown once it printed
        # (cli.main.leave_at_once), and freeing the rows' objects one by one would cost it
        # as much as deduping them. A caller in the same process frees them on its next drain.
        _KEPT[:] = [rows]
    finally:
        if collecting:
            gc.enable()
    if flags != _MAIN:
        conn.execute(f"UPDATE wakes SET claim = 'main' WHERE {UNCLAIMED_SQL}")
    presented = drainsteps.present(conn, "main", rows[-1][0], "", len(shown))
    return presented[2], presented[3], shown, kinds


def _lines(rows: list[tuple[Any, ...]], ended: frozenset[str] = frozenset()
           ) -> tuple[set[int], list[tuple[Any, ...]], set[str]]:
    """The flags found on *rows* (``seq, kind, key, payload, flag``, the flag as
    :data:`_FLAG_SQL` makes it), the rows the drain shows (deduped) and their kinds; a signal
    row keyed by one of *ended* hands over. Whole columns at a time (C loops, not a Python one
    per row)."""
    seqs, kinds, keys, payloads, flags = zip(*rows, strict=True)
    if ended and not ended.isdisjoint(keys) and any(
            kind == "signal" and key in ended for kind, key in zip(kinds, keys, strict=True)):
        raise _Fallback
    flag_set = set(flags)
    kind_set = set(kinds)
    # The full path's test of a usable row (firstmate.store.queue's scan), column by column:
    # anything it would retire and report is its job, and so is a row reserved for a grant.
    if not (seqs[0] > 0 and kind_set <= _KINDS and set(map(type, keys)) == _TEXT
            and set(map(type, payloads)) == _TEXT and all(map(str.strip, keys))
            and not flag_set & _HANDED_OVER):
        raise _Fallback
    by = keys
    if "heartbeat" in kind_set:  # heartbeats collapse into one, whatever their keys
        by = tuple(["" if kind == "heartbeat" else key for kind, key in zip(kinds, keys, strict=True)])
    # drainsteps.dedupe's rule, built by dict(): first-seen order, the last row shown. Rows of
    # one kind (the usual case) are told apart by their keys alone: no pair made per row.
    index = by if len(kind_set) == 1 else zip(kinds, by, strict=True)
    shown = list(dict(zip(index, rows, strict=True)).values())
    return flag_set, shown, kind_set


def acknowledge(env: Mapping[str, str], through: int, generation: str, out: TextIO,
                err: TextIO) -> bool:
    """``fm wake drain --ack-through THROUGH --recovery-generation GENERATION`` as main (both
    already validated): its one-line confirmation to *out*, or its notices to *err*. False:
    nothing done, run the full path."""
    from firstmate.base import ownerlock
    from firstmate.base.errors import UsageError
    from firstmate.fast import drainsteps
    from firstmate.fast.wakeactor import refuse_crew

    refuse_crew(env)
    found = _home(env)
    if found is None:
        return False
    root, state, db = found
    conn = _connect(db)
    if conn is None:
        return False
    notices: list[str] = []
    said: list[str] = []

    def body(conn: sqlite3.Connection) -> None:
        _no_grant(conn)
        try:
            drainsteps.check(conn, "main", through, "")
        except UsageError as exc:
            raise _Fallback from exc
        consumed = drainsteps.consume(conn, "main", through, generation, "")
        notices.extend(consumed[3])
        said.extend([consumed[4]] if consumed[4] else [])
        # An unusable row is retired, with its report, before anything else: the full path's
        # job. Checked last, over the rows left (usually none), and rolled back whole.
        if conn.execute(f"SELECT count(*) FROM wakes WHERE NOT {VALID_SQL}").fetchone()[0]:
            raise _Fallback

    try:
        fd, _ = ownerlock.acquire_recorded(os.path.join(state, "queue.lock"), "queue", root)
        try:
            dbconn.begin(conn, db, None)
            _transact(conn, db, body)
        except _Fallback:
            return False
        finally:
            ownerlock.release(fd)
    finally:
        _close(conn)
    if notices:
        err.write("".join(line + "\n" for line in notices))
    if said:
        out.write(said[0] + "\n")
    return True


__all__ = ["acknowledge", "drain"]
