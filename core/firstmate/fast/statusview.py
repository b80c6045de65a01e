"""``fm status``'s snapshot read without attrs, psutil or the store: the common case, fast.

``fm status`` must start about as fast as an interpreter (SPEC §10: at most 3x ``python -c
pass`` at 10,000 queued rows), and importing attrs alone costs more than that. So the snapshot is
read here with plain functions over plain values (:mod:`firstmate.base.lockprobe`,
:mod:`firstmate.base.ownerrecord`, :mod:`firstmate.base.proctoken`,
:mod:`firstmate.fast.watcherverdict`, :mod:`firstmate.fast.queueview`), and
:func:`snapshot` returns None whenever it is not sure, for :func:`firstmate.cli.status.snapshot`
to take the full path instead:

* a bridge record is present, or a session-lock record that
  :func:`firstmate.fast.sessionview.judge` cannot call held without probing a harness plugin;
* the database is not at the current schema (the store migrates it);
* the watcher singleton is held but its holder cannot be verified from ``/proc`` at once (the
  full path re-reads a record still being written), or a grant's owner cannot be read;
* an SQLite error or an undecodable row while reading (the store reports or scans it).

Refusals (a planted symlink, a non-directory) are the full path's own functions, called in the
same order, so every error is the same one line. The one write a status read makes, publishing
the downtime of a watcher proven gone, is :func:`firstmate.fast.downtimemark.publish_if_gone`;
when ``/proc`` cannot tell whether that watcher runs, the caller's *publish* (the store's
:func:`firstmate.store.downtime.publish_for`, which asks psutil) decides.
"""

from __future__ import annotations

import os
import stat

from firstmate.base import dbconn
from firstmate.base.dbconn import sqlite3
from firstmate.fast import sessionview, watcherverdict

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from firstmate.base.safepaths import StrPath

    #: Publishes the downtime of the watcher whose cycle is open, if it is gone (given the root).
    Publish = Callable[[str], object]

#: state/session.lock: the primary session lock's record (continuity.sessionrecord).
SESSION_RECORD = sessionview.RECORD
#: The watcher's beacon, in the state directory.
BEACON = "watcher.beat"


class _Unsure(Exception):
    """This path cannot answer for certain: the caller takes the full path."""


def snapshot(env: Mapping[str, str], publish: Publish) -> dict[str, object] | None:
    """What ``fm status --json`` prints, or None when the full path must answer."""
    if os.name != "posix":
        return None  # (no flock: the store locks through portalocker there)
    try:
        return _snapshot(env, publish)
    except _Unsure:
        return None


def locate(env: Mapping[str, str]) -> tuple[str, str, str, str, bool]:
    """The home a status reports on, ``(root, source, where, state, state_dir)`` (*state_dir*:
    its state directory exists): found, and refused in one line when it is unsafe, in the same
    order on both paths. A planted link at the singleton's lock or the beacon is unsafe state,
    not "no watcher"."""
    from firstmate.base.homeroot import find_home
    from firstmate.base.safepaths import refuse_non_directory, refuse_symlink

    root, source, where = find_home(env)
    state = os.path.join(root, "state")
    refuse_non_directory(root)
    refuse_non_directory(state)
    state_dir = _real_dir(state)
    if state_dir:
        refuse_symlink(os.path.join(state, f"{watcherverdict.LOCK_NAME}.lock"))
        refuse_symlink(os.path.join(state, BEACON))
    return root, source, where, state, state_dir


def empty_queue() -> dict[str, object]:
    """The queue of a home without a database."""
    return {"depth": 0, "last_seq": 0, "oldest": None, "pending": {"main": 0, "branch": 0},
            "unusable": 0, "grant": None}


def report(home: tuple[str, str, str], verdict: watcherverdict.Verdict,
           queue: dict[str, object], episode: object, session: dict[str, object], away: bool,
           bridges: list[str]) -> dict[str, object]:
    """What ``fm status --json`` prints, from what either path read: *home* is ``(root,
    source, where)``."""
    from firstmate.base.homeroot import reason

    root, source, where = home
    healthy, state_name, _verified, pid, _identity, age, limit = verdict
    return {
        "home": root,
        "home_source": source,
        "home_reason": reason(root, source, where),
        "watcher": {
            "healthy": healthy,
            "state": state_name,
            "pid": pid,
            "beacon_age": None if age is None else round(age, 3),
            "grace": limit,
        },
        "queue": queue,
        "episode": episode,
        "session_lock": session,
        "away": away,
        "bridges": bridges,
    }


def _snapshot(env: Mapping[str, str], publish: Publish) -> dict[str, object]:
    root, source, where, state, state_dir = locate(env)
    lock_state: dict[str, object] = {"state": "free", "pid": None}
    lock = os.path.join(state, f"{watcherverdict.LOCK_NAME}.lock")
    beacon = os.path.join(state, BEACON)
    if state_dir:
        if _bridge_records(state):
            raise _Unsure
        if os.path.lexists(os.path.join(state, SESSION_RECORD)):
            # The full path's plugin probe reads the process's own environment, so the memo's
            # table key is checked against that one too.
            session = None if os.path.islink(root) else sessionview.judge(state, os.environ)
            if session is None:
                raise _Unsure
            lock_state = {"state": session[0], "pid": session[1]}
    verdict = _watcher(root, state_dir, lock, beacon, watcherverdict.grace(env))
    db = os.path.join(state, "firstmate.db")
    conn = None
    if not verdict[0] and os.path.isfile(db):
        conn = _publish_if_gone(root, state, db, publish)
    queue = empty_queue()
    episode: object = None
    try:
        if os.path.lexists(db):
            if conn is None:
                conn = _open(state, db)
            status = _queue(conn)
            episode = status.pop("episode", None)
            queue.update(status)
    finally:
        if conn is not None:
            # Closed explicitly: ``fm status`` leaves without its teardown, and the last
            # connection's close checkpoints, so the database file is whole once fm is idle.
            try:  # noqa: SIM105 - contextlib costs a status call an import
                conn.close()
            except sqlite3.Error:
                pass
    return report((root, source, where), verdict, queue, episode, lock_state,
                  _exists(os.path.join(state, "away")), [])


def _real_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _bridge_records(state: str) -> bool:
    # Records are state/bridge-<harness>.json; an unreadable directory is the full path's error.
    try:
        return any(name.startswith("bridge-") for name in os.listdir(state))
    except OSError:
        raise _Unsure from None


def _exists(path: str) -> bool:
    """``Path.exists``: a missing path (or one through a non-directory or a link loop) is
    False; any other failure is not this path's to report."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno in (2, 9, 20, 40):  # ENOENT, EBADF, ENOTDIR, ELOOP (pathlib's list)
            return False
        raise _Unsure from None
    return True


def _watcher(root: str, state_dir: bool, lock: str, beacon: str,
             limit: float) -> watcherverdict.Verdict:
    return watcherverdict.read(root, state_dir, lock, beacon, limit, _holder)


def _holder(lock: StrPath) -> watcherverdict.Holder | None:
    """The singleton's holder as ``/proc`` proves it; unsure when it cannot (a record being
    written or garbled, a holder it cannot read: the full path re-reads and asks psutil)."""
    from firstmate.base import lockprobe, ownerrecord, proctoken

    probed = lockprobe.probe(lock)
    if probed is None or not probed[0]:
        return None
    record = ownerrecord.parse(probed[1])
    if record is None:
        raise _Unsure
    pid, identity, home, role, _at = record
    fields = proctoken.parse(identity)
    if fields is None or fields[0] != pid or proctoken.running(fields) is not True:
        raise _Unsure
    return pid, identity, home, role, True


def _open(state: str, db: str) -> sqlite3.Connection:
    """The store's connection checks, in its order; a database not at the current schema is
    the store's to migrate or refuse."""
    dbconn.check_paths(state, db)
    dbconn.prepare_file(db)
    conn = dbconn.open_connection(db)
    try:
        current = dbconn.schema_version(conn) == dbconn.SCHEMA_VERSION
    except sqlite3.Error:
        current = False
    if not current:
        conn.close()
        raise _Unsure
    return conn


def _publish_if_gone(root: str, state: str, db: str, publish: Publish) -> sqlite3.Connection | None:
    """:func:`firstmate.fast.downtimemark.publish_if_gone`: publish the downtime of the open
    cycle's watcher when it is proven gone (when ``/proc`` cannot tell, the caller's *publish*
    asks psutil). Returns the open connection (None when the store could not be opened: the
    publication is best effort)."""
    from firstmate.base.errors import FirstmateError
    from firstmate.fast import downtimemark

    try:
        conn = _open(state, db)
    except (FirstmateError, OSError):
        return None
    try:
        done = downtimemark.publish_if_gone(conn, db, root)
    except sqlite3.Error:
        conn.close()
        raise _Unsure from None
    if done is None:
        publish(root)  # /proc cannot tell: the store asks psutil
    return conn


def _queue(conn: sqlite3.Connection) -> dict[str, object]:
    from firstmate.fast import episoderow, queueview

    try:
        conn.execute("BEGIN DEFERRED")
        grant = queueview.grant(conn)
        owner = None if grant is None else _owner_state(grant[0], grant[1])
        return queueview.status_json(conn, owner, oldest_row=queueview.oldest(conn),
                                     episode=episoderow.read(conn), grant_row=grant)
    except (sqlite3.Error, ValueError, TypeError):
        raise _Unsure from None
    finally:
        dbconn.end_read(conn)


def _owner_state(pid: int, identity: str) -> str:
    """``grants.owner_state`` from ``/proc``: live, gone, or unsure (the store asks psutil)."""
    from firstmate.base.proctoken import owner_state

    found = owner_state(pid, identity)
    if found is None:
        raise _Unsure
    return found


__all__ = ["BEACON", "SESSION_RECORD", "empty_queue", "locate", "report", "snapshot"]
