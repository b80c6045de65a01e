"""Appends whose commit ended in doubt, and their retries: ``state/spool/.doubt``.

An append retries its transaction in the same process when the disk fails it
(:func:`firstmate.fast.appendpath.commit_locked`), and a failed ``COMMIT`` is settled when it
can be (:mod:`firstmate.base.dbfault`), so nearly every failure is known to have written nothing.
When it is not known (no transaction on the same connection could commit afterwards), the row
may still take effect later, when the write-ahead log is next recovered. Its producer then
leaves the row here (one framed record, like a riding one, with the id whose marker
``kv['rode:<id>']`` commits with it) and says so. The next commit that inserts an identical row
(same kind, key and payload: the producer running the same append again) looks for that
marker first: when the doubtful row did commit, its number is given and nothing is inserted
again; either way the record is dropped. Records older than the markers
(:data:`firstmate.fast.appendspool.ABANDONED_SECONDS`) are dropped unread.

Only a leader holding the queue lock reads or writes the file, so it needs no lock of its own.
Standard library only (the append path's layer); loaded once the note exists or a commit failed.
"""

from __future__ import annotations

import os
import time

from firstmate.fast import appendspool

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate.base.dbconn import sqlite3
    from firstmate.base.safepaths import StrPath
    from firstmate.fast.appendspool import Entry

NAME = appendspool.DOUBT


def path_of(state: StrPath) -> str:
    return os.path.join(appendspool.spool_dir(state), NAME)


def _frame(entry: Entry) -> bytes:
    ident, at, kind, key, payload = entry
    return (appendspool.START + appendspool.SEP.join((ident, repr(float(at)), kind, key, payload))
            + appendspool.END).encode()


def record(state: StrPath, entry: Entry) -> bool:
    """Leave *entry* (id, at, kind, key, payload) as in doubt; False when it could not be
    written (the disk refuses that too)."""
    from firstmate.base.safepaths import open_private

    try:
        fd = open_private(path_of(state), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    except Exception:  # (OSError, or the StateError of a symlink there)
        return False
    try:
        data = _frame(entry)
        return os.write(fd, data) == len(data)
    except OSError:
        return False
    finally:
        os.close(fd)


def read(state: StrPath) -> list[Entry] | None:
    """The records still young enough to resolve, oldest first; None when there is no such
    file (the usual case: one system call). An unreadable file, or one that is not a plain
    file, holds none (a retry then inserts its row)."""
    import stat

    where = path_of(state)
    try:
        fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError:
        return []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return []
        data = os.read(fd, min(st.st_size, 1 << 20))
    except OSError:
        return []
    finally:
        os.close(fd)
    oldest = time.time_ns() - int(appendspool.ABANDONED_SECONDS * 1e9)
    found: list[Entry] = []
    for chunk in data.split(appendspool.START.encode())[1:]:
        end = chunk.find(appendspool.END.encode())
        if end < 0:
            continue
        ident, _, rest = chunk[:end].partition(appendspool.SEP.encode())
        fields = appendspool.parse_row(rest)
        name = ident.decode("ascii", "replace")
        stamp = name.split("-", 1)[0]
        if fields is None or not stamp.isdigit() or int(stamp) < oldest:
            continue
        found.append((name, *fields))
    return found


def resolve(conn: sqlite3.Connection, doubts: list[Entry], entries: list[Entry],
            already: list[tuple[str, int]]) -> tuple[list[Entry], set[str]]:
    """Inside the leader's transaction: *entries* without those whose in-doubt twin (an
    identical row in *doubts*) did commit (each such one goes to *already* as ``(id, seq)``),
    and the ids of the *doubts* that were resolved (drop them once this commit is done)."""
    twins: dict[tuple[str, str, str], list[str]] = {}
    for ident, _at, kind, key, payload in doubts:
        twins.setdefault((kind, key, payload), []).append(ident)
    kept: list[Entry] = []
    resolved: set[str] = set()
    for entry in entries:
        names = twins.pop((entry[2], entry[3], entry[4]), None)
        if not names:
            kept.append(entry)
            continue
        resolved.update(names)
        seq = next((got for got in (appendspool.committed(conn, name) for name in names)
                    if got is not None), None)
        if seq is None:
            kept.append(entry)  # the doubtful one never took effect: this one is the row
        else:
            already.append((entry[0], seq))
    return kept, resolved


def forget(state: StrPath, doubts: list[Entry], resolved: set[str]) -> None:
    """After the commit: keep only the records neither resolved nor too old (best effort)."""
    keep = [entry for entry in doubts if entry[0] not in resolved]
    where = path_of(state)
    try:
        if not keep:
            os.unlink(where)
            return
        from firstmate.base.safepaths import open_private

        tmp = f"{where}.{os.getpid()}.tmp"
        fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, b"".join(_frame(entry) for entry in keep))
        finally:
            os.close(fd)
        os.rename(tmp, where)
    except Exception:  # (OSError, StateError) a record left behind only resolves again
        pass


def append_failed(state: StrPath, db: StrPath, own: tuple[str, float, str, str, str],
                  exc: BaseException, doubt: bool, *, rode: bool = False) -> BaseException:
    """The error an append reports once every try failed with *exc*: whether its row *own*
    ``(id, at, kind, key, payload)`` was queued, as far as is known. When it may have been
    (*doubt*), the row is left in doubt (:func:`record`), so that the same append run again is
    queued once. *rode*: the doubt is that the row rode another producer's commit, which may
    have taken it before this append's own tries failed."""
    from firstmate.base.dbfault import CommitFailed
    from firstmate.base.errors import StateError

    where = os.fspath(db)
    if isinstance(exc, CommitFailed):
        reason = exc.reason
    elif isinstance(exc, OSError):
        reason = exc.strerror or str(exc)
    else:  # (the database's own words, not the sentence already made of them)
        reason = str(exc.__cause__ or exc)
    if doubt:
        what = ("it rode another append's commit, which may have taken it, and then this "
                f"append failed on its own ({reason})" if rode else
                f"committing it to {where} failed ({reason}) after it was written")
        if record(state, own):
            return StateError(
                f"the row may or may not be queued: {what}; running the same append again "
                "within ten minutes is safe (it is queued once): check the disk (dmesg) first")
        return StateError(
            f"the row may or may not be queued: {what}, and the note that makes a retry safe "
            "could not be written either; check the disk (dmesg), then look (fm wake query) "
            "before appending it again")
    if isinstance(exc, CommitFailed):
        return StateError(
            f"the row was not queued: committing it to {where} failed ({reason}); nothing was "
            "written: check the disk (dmesg) and free space, and retry")
    if isinstance(exc, OSError):
        return StateError(
            f"the row was not queued: the spool in {os.fspath(state)} failed ({reason}); "
            "nothing was written: check the disk (dmesg) and retry")
    return exc  # (translated already: it says what happened, and that nothing was written)


__all__ = ["NAME", "append_failed", "forget", "path_of", "read", "record", "resolve"]
