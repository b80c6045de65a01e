"""What a failed database operation means, found out before it is reported: damage or a passing
fault, written or not.

Loaded only when something failed (the append path never imports it otherwise). Two questions
are settled here rather than guessed at:

* **Is the file damaged?** SQLite reports a read that failed as a malformed database as readily
  as real damage. Before the user is told to move a database aside, a fresh connection checks
  it (``PRAGMA quick_check``, read only, up to three times): a file that checks out whole was
  hit by a passing fault and stays in service; one that every check finds damaged is damaged;
  one whose checks the disk itself fails (a page quick_check cannot read, a read error) is
  neither advised away nor called whole.
* **Did a failed COMMIT take effect?** In WAL mode a ``COMMIT`` whose sync fails has already
  written its frames: the transaction is invisible now but may come back with the log's next
  recovery. :func:`settle` writes one small transaction on the same connection: its frames go
  where the failed ones went, so once it commits the failed one can never come back (nothing was
  written). When no settling transaction commits, whether the failed one took effect is not
  known, and :class:`CommitFailed` says so.
"""

from __future__ import annotations

import os
import time

from firstmate.base.errors import StateError

try:  # the C module alone, as dbconn uses it (which imports this module, not the other way)
    import _sqlite3 as sqlite3
except ImportError:  # pragma: no cover - an interpreter without CPython's private module
    import sqlite3  # type: ignore[no-redef]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate.base.safepaths import StrPath

#: SQLite's words for a file that does not read as a database: damage, or a read that failed.
DAMAGE_MARKERS = ("malformed", "not a database", "file is encrypted", "database corrupt")
#: The fact a settling transaction writes (``kv``): when a failed commit was last settled.
SETTLED_KEY = "db.settled"
#: Settling transactions tried after a failed commit.
SETTLE_TRIES = 3


class CommitFailed(StateError):
    """A ``COMMIT`` failed. :attr:`settled`: it is known to have written nothing; else whether
    it took effect is not known (the message says which)."""

    def __init__(self, message: str, *, settled: bool, where: str, reason: str) -> None:
        super().__init__(message)
        self.settled = settled
        self.where = where
        self.reason = reason


def damage_suspected(exc: BaseException) -> bool:
    """Whether *exc* reads as a damaged file (which a passing read fault can also produce)."""
    text = str(exc).lower()
    return type(exc) is sqlite3.DatabaseError or any(m in text for m in DAMAGE_MARKERS)


#: ``sqlite3_errorcode`` values of an I/O error that says nothing about the file's contents:
#: any ``SQLITE_IOERR`` (10) but a short read (522: the file ends before its pages do).
_IOERR, _SHORT_READ = 10, 522


def _fault_code(code: int) -> bool:
    return code & 0xFF == _IOERR and code != _SHORT_READ


def _verdict_of(exc: BaseException) -> str:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and _fault_code(code):
        return "fault"
    return "damaged" if damage_suspected(exc) else "fault"


def _rows_verdict(rows: list[tuple[object, ...]]) -> tuple[str, str]:
    """quick_check's rows: ``ok``, or each problem it lists; a page it could not read because
    the disk failed (``unable to get the page. error code=266``) is the disk's fault."""
    if rows == [("ok",)]:
        return "ok", ""
    import re

    problems = [line for row in rows for line in str(row[0] if row else "").splitlines()
                if line.strip() and not line.startswith("*** in database")]
    text = "; ".join(problems) or "quick_check found problems"
    codes = [re.search(r"unable to get the page\. error code=(\d+)", line) for line in problems]
    if problems and all(code is not None and _fault_code(int(code.group(1))) for code in codes):
        return "fault", text
    return "damaged", text


def _check_once(path: str) -> tuple[str, str]:
    """One look: ``("ok", "")``, ``("damaged", why)`` or ``("fault", why)`` (the disk failed
    the look itself)."""
    try:
        os.lstat(path)  # (connect would create a missing file)
    except OSError as exc:
        return "fault", exc.strerror or str(exc)
    try:
        conn = sqlite3.connect(path, timeout=5, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        return _verdict_of(exc), str(exc)
    try:
        conn.execute("PRAGMA query_only = 1")
        return _rows_verdict(conn.execute("PRAGMA quick_check").fetchall())
    except sqlite3.Error as exc:
        return _verdict_of(exc), str(exc)
    finally:
        try:  # noqa: SIM105 - contextlib costs an import
            conn.close()
        except sqlite3.Error:
            pass


#: Looks at a database suspected of damage: it is called damaged only when every one finds
#: damage and none is failed by the disk itself.
CHECKS = 3


def examine(path: StrPath) -> tuple[str, str]:
    """Whether the database at *path* checks out whole: ``("ok", "")`` once a check passes;
    ``("damaged", why)`` when :data:`CHECKS` checks all find damage; else ``("unknown", why)``:
    the disk failed the checks themselves, so nothing is known about the file."""
    where = os.fspath(path)
    found: list[tuple[str, str]] = []
    for _ in range(CHECKS):
        verdict, why = _check_once(where)
        if verdict == "ok":
            return "ok", ""
        found.append((verdict, why))
    if all(verdict == "damaged" for verdict, _ in found):
        return found[-1]
    return "unknown", next(why for verdict, why in found if verdict == "fault")


def read_failed(path: StrPath, exc: BaseException, damaged: StateError) -> StateError:
    """The error for *exc*, which reads as damage: *damaged* (the advice to move the file
    aside) only when the file checks out damaged; otherwise what is known."""
    where, text = os.fspath(path), str(exc) or type(exc).__name__
    verdict, why = examine(path)
    if verdict == "damaged":
        return damaged
    if verdict == "ok":
        return StateError(
            f"reading {where} failed ({text}), but the database checks out whole (PRAGMA "
            "quick_check: ok): a passing read fault, not damage, and what it interrupted was "
            "not written; retry, and check the disk (dmesg) if it happens again"
        )
    return StateError(
        f"reading {where} failed ({text}), and checking it failed too ({why}): the disk is not "
        "answering, or the file is damaged; what it interrupted was not written; do not move "
        "it aside yet: retry once the disk answers, and move it aside only if "
        f"sqlite3 {where} 'PRAGMA integrity_check' reports damage"
    )


def settle(conn: sqlite3.Connection) -> bool:
    """After a failed ``COMMIT`` on *conn* (rolled back): commit one small transaction on the
    same connection, whose frames replace the failed one's in the write-ahead log, so that the
    failed one can never take effect later. True once one commits."""
    for _ in range(SETTLE_TRIES):
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                "value = excluded.value", (SETTLED_KEY, repr(time.time())))
            conn.execute("COMMIT")
            return True
        except sqlite3.Error:
            try:  # noqa: SIM105 - contextlib costs an import
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
    return False


def commit_failed(conn: sqlite3.Connection, path: StrPath, exc: BaseException) -> CommitFailed:
    """The error for a ``COMMIT`` on *conn* that raised *exc* (already rolled back), settled
    first (:func:`settle`) so that it says whether anything was written."""
    where, text = os.fspath(path), str(exc) or type(exc).__name__
    if settle(conn):
        return CommitFailed(
            f"committing to {where} failed ({text}); nothing was written: check the disk "
            "(dmesg) and free space, and retry", settled=True, where=where, reason=text)
    return CommitFailed(
        f"committing to {where} failed ({text}) after the change was written, so whether it "
        "took effect is not known until the disk answers; check the disk (dmesg), then look "
        "(fm wake query) before running it again", settled=False, where=where, reason=text)


def outcome(exc: BaseException) -> str | None:
    """What a failed try of a transaction left: ``"settled"`` (a failed commit that could never
    take effect), ``"doubt"`` (a failed commit that may yet), ``"unwritten"`` (the disk failed
    it before its commit: nothing was written), or None (not the disk: a bug or bad input,
    which trying again would only repeat)."""
    if isinstance(exc, CommitFailed):
        return "settled" if exc.settled else "doubt"
    if isinstance(exc, OSError):
        return "unwritten"
    cause = exc.__cause__ if isinstance(exc, StateError) else exc
    if isinstance(cause, sqlite3.Error):
        name = str(getattr(cause, "sqlite_errorname", ""))
        if name.startswith(("SQLITE_IOERR", "SQLITE_CORRUPT", "SQLITE_NOTADB")):
            return "unwritten"
    return None


__all__ = ["DAMAGE_MARKERS", "SETTLED_KEY", "SETTLE_TRIES", "CommitFailed",
           "commit_failed", "damage_suspected", "examine", "outcome", "read_failed", "settle"]
