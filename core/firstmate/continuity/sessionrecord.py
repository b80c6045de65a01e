"""The session lock's record (``state/session.lock``): who owns the lock, read without ever
following a symlink or blocking on a FIFO, and the errors a session-lock operation raises."""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Literal

import attrs

from firstmate.base.errors import FirstmateError
from firstmate.base.exitcodes import ExitCode
from firstmate.store.home import Home
from firstmate.store.identity import ProcessIdentity

#: ``state/<name>.lock`` of the record, and of the lock serialising its writers.
RECORD_NAME = "session"
RECORD_VERSION = 1
#: A record is a few hundred bytes; more than this is garbage.
RECORD_MAX = 64 * 1024
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
PID_IN_TEXT = re.compile(rb'"pid"\s*:\s*([0-9]{1,10})\b')


class SessionLockError(FirstmateError):
    """A session-lock operation was refused or could not be completed safely (exit 1)."""

    exit_code = ExitCode.FAILED

    def __init__(self, message: str, *, holder_pid: int | None = None) -> None:
        super().__init__(message)
        self.holder_pid = holder_pid


class SessionLockHeld(SessionLockError):
    """Another live session owns the lock."""


class HarnessNotFound(SessionLockError):
    """No harness process could be found above the caller."""


@attrs.frozen
class SessionRecord:
    """The owner of the session lock, as stored in ``state/session.lock``."""

    pid: int
    #: The holder's :meth:`ProcessIdentity.token`; empty only in an all-zero record.
    identity: str
    harness: str
    acquired_at: float
    #: A trusted session id, when the holder was anchored through a harness's session anchor.
    session_id: str | None = None

    @property
    def process(self) -> ProcessIdentity | None:
        return ProcessIdentity.parse(self.identity) if self.pid > 0 else None

    def to_dict(self) -> dict[str, object]:
        return {
            "version": RECORD_VERSION, "pid": self.pid, "identity": self.identity,
            "harness": self.harness, "session_id": self.session_id,
            "acquired_at": self.acquired_at,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, data: str | bytes) -> SessionRecord | None:
        """The record in *data*, or None when it is not a well-formed session record.

        pid 0 is the all-zero record (well-formed, owned by nobody). Any other pid needs an
        identity token naming that same pid.
        """
        try:
            obj = json.loads(data)
        except (ValueError, TypeError, RecursionError):
            return None
        if not isinstance(obj, dict):
            return None
        version = obj.get("version", RECORD_VERSION)
        pid, token, harness = obj.get("pid"), obj.get("identity", ""), obj.get("harness", "")
        at, session_id = obj.get("acquired_at"), obj.get("session_id")
        if version != RECORD_VERSION or type(pid) is not int or pid < 0:
            return None
        if not isinstance(token, str) or not isinstance(harness, str):
            return None
        if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
            return None
        if session_id is not None and not (
            isinstance(session_id, str) and SESSION_ID.fullmatch(session_id)
        ):
            return None
        if pid > 0:
            ident = ProcessIdentity.parse(token)
            if ident is None or ident.pid != pid or not harness:
                return None
        return cls(pid=pid, identity=token, harness=harness, acquired_at=float(at),
                   session_id=session_id)


RecordKind = Literal["absent", "ok", "empty", "malformed", "symlink", "not-regular", "unreadable"]


@attrs.frozen
class RecordRead:
    """What was found at the record path. ``pid`` is salvaged from a malformed record."""

    kind: RecordKind
    record: SessionRecord | None = None
    pid: int | None = None
    detail: str = ""
    #: The offending path of a ``symlink`` or ``not-regular`` result.
    path: str = ""


def record_path(home: Home) -> Path:
    return home.lock_path(RECORD_NAME)


def read_record(home: Home) -> RecordRead:
    """Read the record without following a symlink and without blocking on a FIFO."""
    path = record_path(home)
    for parent in (home.root, home.state):
        try:
            if stat.S_ISLNK(os.lstat(parent).st_mode):
                return RecordRead("symlink", detail=f"{parent} is a symlink", path=str(parent))
        except FileNotFoundError:
            return RecordRead("absent")
        except OSError as exc:
            return RecordRead("unreadable", detail=f"cannot stat {parent}: {exc.strerror}")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return RecordRead("absent")
    except OSError as exc:
        if stat.S_ISLNK(_lmode(path)):
            return RecordRead("symlink", detail=f"{path} is a symlink", path=str(path))
        return RecordRead("unreadable", detail=f"cannot open {path}: {exc.strerror}")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return RecordRead("not-regular", detail=f"{path} is not a regular file",
                              path=str(path))
        data = os.read(fd, RECORD_MAX + 1)
    except OSError as exc:
        return RecordRead("unreadable", detail=f"cannot read {path}: {exc.strerror}")
    finally:
        os.close(fd)
    if not data.strip():
        return RecordRead("empty", detail=f"{path} is empty")
    record = SessionRecord.from_json(data) if len(data) <= RECORD_MAX else None
    if record is None:
        m = PID_IN_TEXT.search(data)
        return RecordRead("malformed", pid=int(m.group(1)) if m else None,
                          detail=f"{path} does not hold a session record")
    return RecordRead("ok", record=record, pid=record.pid)


def _lmode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


__all__ = ["RECORD_NAME", "RECORD_VERSION", "SESSION_ID", "HarnessNotFound", "RecordRead",
           "SessionLockError", "SessionLockHeld", "SessionRecord", "read_record", "record_path"]
