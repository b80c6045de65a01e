"""Kernel file locks (``flock`` on POSIX, portalocker elsewhere) that die with their holder.

A lock is the kernel lock on an open file description, so it is released the moment its holder
exits or is killed; a stale lock file can never block anyone. After taking the kernel lock the
holder writes an owner record (pid, identity token, home, role) into the lock file so that
others can name and verify it. The record is advice for messages; the kernel lock is the truth.

Lock files are never removed: unlinking a lock file lets two processes lock two different inodes.
The descriptor is close-on-exec, so a spawned child never keeps its parent's lock alive.

Which primitive takes the lock: **portalocker** in every long-running process (the watcher, the
arm, ``fm checkpoint``, ``fm bridge``, ``fm host``, ``fm top``: :func:`prefer_portalocker`, called
by the command line for those commands) and everywhere off POSIX. Short commands on POSIX — the
hooks, ``fm wake append``, ``fm crew status``, ``fm status`` — use a thin ``fcntl.flock`` adapter
with portalocker's names instead: portalocker uses ``flock`` there itself, so the two exclude
each other exactly, but importing it costs about 6x an interpreter's whole start (it reads its
package metadata through importlib.metadata and email; ``bench/coldstart.py`` prints the figure
beside the hot paths), which those paths cannot afford and a process that runs for minutes pays
once. The blocking acquisition and the owner record of those short paths are plain functions
in :mod:`firstmate.base.ownerlock`, which ``fm wake append`` uses without importing this module.
:mod:`firstmate.store.identity` is imported only when a lock is taken or inspected.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from pathlib import Path
from types import ModuleType
from typing import IO, Literal

import attrs

from firstmate.base import lockprobe, ownerlock, ownerrecord
from firstmate.base.errors import LockTimeout, StateError, UsageError
from firstmate.base.ownerlock import acquire_recorded, lock_failed, record_json, write_record
from firstmate.base.safepaths import open_private

HolderState = Literal["free", "held", "held-unverified"]

#: An owner record is small; anything longer than this is garbage.
_RECORD_MAX = lockprobe.RECORD_MAX
#: Re-reads of an unverifiable record, riding out a holder that is still writing it.
_VERIFY_RETRIES = 5

_PID_IN_TEXT = re.compile(rb'"pid"\s*:\s*([0-9]{1,10})\b')


_PREFER_PORTALOCKER = False


def prefer_portalocker() -> None:
    """Lock through portalocker from now on in this process (a long-running one: see above)."""
    global _PREFER_PORTALOCKER
    _PREFER_PORTALOCKER = True


def uses_portalocker() -> bool:
    return os.name != "posix" or _PREFER_PORTALOCKER


def _portalocker() -> ModuleType:
    """portalocker's API, or on POSIX in a short command the ``fcntl.flock`` adapter with the
    same names (see the module docstring for why)."""
    if not uses_portalocker():
        return _flock_api()
    import portalocker

    return portalocker


def _flock_api() -> ModuleType:
    global _FLOCK
    if _FLOCK is None:
        import fcntl

        api = ModuleType("firstmate._flock")

        class LockException(Exception):
            pass

        class AlreadyLocked(LockException):
            pass

        def lock(fh: IO[bytes], flags: int) -> None:
            try:
                fcntl.flock(fh.fileno(), flags)
            except BlockingIOError as exc:
                raise AlreadyLocked(str(exc)) from exc
            except OSError as exc:
                raise LockException(str(exc)) from exc

        def unlock(fh: IO[bytes]) -> None:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            except OSError as exc:
                raise LockException(str(exc)) from exc

        api.__dict__.update(
            LOCK_EX=fcntl.LOCK_EX, LOCK_SH=fcntl.LOCK_SH, LOCK_NB=fcntl.LOCK_NB,
            LockException=LockException, AlreadyLocked=AlreadyLocked, lock=lock, unlock=unlock,
        )
        _FLOCK = api
    return _FLOCK


_FLOCK: ModuleType | None = None


@attrs.frozen
class OwnerRecord:
    """Who holds a lock, as written into the lock file by the holder.

    ``verified`` is not stored: :meth:`FileLock.holder` sets it when the record's identity matches
    a live process. ``pid`` 0 means the record was unreadable and named no pid.
    """

    pid: int
    identity: str
    home: str
    role: str
    acquired_at: float
    verified: bool = attrs.field(default=False, eq=False)

    @property
    def known_pid(self) -> int | None:
        return self.pid if self.pid > 0 else None

    def to_json(self) -> str:
        return record_json(self.pid, self.identity, self.home, self.role, self.acquired_at)

    @classmethod
    def from_json(cls, data: str | bytes) -> OwnerRecord | None:
        """The record in *data*, or None when it is not a well-formed owner record."""
        fields = ownerrecord.parse(data)
        if fields is None:
            return None
        pid, identity, home, role, at = fields
        return cls(pid=pid, identity=identity, home=home, role=role, acquired_at=at)


def _token() -> str:
    """This process's identity token (``/proc/self``, else psutil)."""
    from firstmate.store.identity import current

    return current().token()


def _salvage_pid(data: bytes) -> int:
    m = _PID_IN_TEXT.search(data)
    return int(m.group(1)) if m else 0


def _fmt_seconds(seconds: float) -> str:
    return f"{seconds:g}"


@attrs.define(eq=False)
class FileLock:
    """An exclusive lock on *path* for *role*, owned by this process while :attr:`held`.

    Two FileLock objects on one path exclude each other even inside one process. One object is
    meant for one thread. A process forked while holding a lock does not release it on exit of
    the fork: only the acquiring process releases.
    """

    path: Path
    role: str
    home: Path
    #: Wait used by ``with lock:`` (None blocks until acquired).
    timeout: float | None = None
    _fh: IO[bytes] | None = attrs.field(default=None, init=False, repr=False)
    _owner_pid: int = attrs.field(default=0, init=False, repr=False)
    _record: OwnerRecord | None = attrs.field(default=None, init=False, repr=False)

    @property
    def held(self) -> bool:
        return self._fh is not None and self._owner_pid == os.getpid()

    def acquire(self, timeout: float | None = None) -> None:
        """Take the lock. None waits as long as it takes; 0 tries once; more waits that long.

        Raises :class:`LockTimeout` naming the holder when a bounded wait runs out, and
        :class:`StateError` when the lock file is unsafe (a symlink) or cannot be opened.
        """
        if timeout is not None and not (timeout >= 0 and math.isfinite(timeout)):
            raise UsageError(f"lock wait must be a non-negative number of seconds, got {timeout}")
        if self.held:
            raise RuntimeError(f"lock {self.role} is already held by this FileLock")
        if timeout is None and not uses_portalocker():
            # The blocking POSIX case is exactly the fast append path's: one implementation.
            fd, (pid, identity, at) = acquire_recorded(self.path, self.role, self.home,
                                                       _token())
            self._record = OwnerRecord(pid=pid, identity=identity, home=str(self.home),
                                       role=self.role, acquired_at=at, verified=True)
            self._fh, self._owner_pid = os.fdopen(fd, "r+b", buffering=0), os.getpid()
            return
        pl = _portalocker()
        fh = self._open(os.O_RDWR | os.O_CREAT)
        try:
            if timeout is None:
                # One blocking call: the kernel wakes us as soon as the holder releases or dies.
                self._lock(pl, fh, pl.LOCK_EX)
            else:
                self._wait_bounded(pl, fh, timeout)
            self._record = self._write_record(fh)
        except BaseException:
            fh.close()
            raise
        self._fh, self._owner_pid = fh, os.getpid()

    def release(self) -> None:
        """Drop the lock (a no-op when it is not held)."""
        fh, self._fh, self._record = self._fh, None, None
        if fh is None:
            return
        try:
            if self._owner_pid == os.getpid():
                # Clear the record first, so a free lock file never names a past holder.
                with contextlib.suppress(OSError):
                    fh.seek(0)
                    fh.truncate()
                pl = _portalocker()
                with contextlib.suppress(pl.LockException):
                    pl.unlock(fh)  # closing the descriptor releases it anyway
        finally:
            fh.close()

    def __enter__(self) -> FileLock:
        self.acquire(self.timeout)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def holder_state(self) -> HolderState:
        """``free``, ``held`` (by a verified live process) or ``held-unverified``."""
        return self._inspect()[0]

    def holder(self) -> OwnerRecord | None:
        """The holder's record, or None when the lock is free.

        The record has ``verified=True`` when its identity matches a live process. When the
        kernel lock is held but the record is missing, garbled or names another process, it has
        ``verified=False`` and the recorded pid when one can be read (else pid 0).
        """
        return self._inspect()[1]

    # --- internals ---------------------------------------------------------------------------

    def _open(self, flags: int) -> IO[bytes]:
        fd = open_private(self.path, flags)
        return os.fdopen(fd, "r+b" if flags & os.O_RDWR else "rb", buffering=0)

    def _lock(self, pl: ModuleType, fh: IO[bytes], flags: int) -> None:
        try:
            pl.lock(fh, flags)
        except pl.AlreadyLocked:
            raise
        except pl.LockException as exc:
            raise lock_failed(self.path, exc) from exc

    def _wait_bounded(self, pl: ModuleType, fh: IO[bytes], timeout: float) -> None:
        def attempt() -> bool:
            try:
                self._lock(pl, fh, pl.LOCK_EX | pl.LOCK_NB)
            except pl.AlreadyLocked:
                return False
            return True

        start = time.monotonic()
        if not ownerlock.poll(attempt, timeout):
            raise self._timeout(timeout, time.monotonic() - start)

    def _timeout(self, timeout: float, waited: float) -> LockTimeout:
        rec = self.holder()
        after = _fmt_seconds(timeout)
        if rec is None:
            who = "another process (it has just released it)"
        elif rec.verified:
            who = f"live pid {rec.pid}"
        elif rec.known_pid:
            who = f"pid {rec.pid} (owner record unverified)"
        else:
            who = "a process whose owner record is unreadable"
        return LockTimeout(
            f"lock {self.role} remains held by {who} after {after}s",
            holder_pid=rec.known_pid if rec else None,
            waited=waited,
        )

    def _write_record(self, fh: IO[bytes]) -> OwnerRecord:
        pid, identity, at = write_record(fh.fileno(), self.path, self.role, self.home, _token())
        return OwnerRecord(pid=pid, identity=identity, home=str(self.home), role=self.role,
                           acquired_at=at, verified=True)

    def _probe(self) -> tuple[bool, bytes] | None:
        """(held, record bytes); None when the lock file does not exist (so nobody holds it).
        On POSIX, :func:`firstmate.base.lockprobe.probe` (portalocker's lock there is the same
        ``flock``); portalocker's own probe elsewhere."""
        if os.name == "posix":
            return lockprobe.probe(self.path)
        try:  # pragma: no cover - off POSIX
            fh = self._open(os.O_RDWR)
        except StateError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):
                return None
            raise
        with fh:
            pl = _portalocker()
            try:
                self._lock(pl, fh, pl.LOCK_EX | pl.LOCK_NB)
            except pl.AlreadyLocked:
                try:
                    return True, fh.read(_RECORD_MAX)
                except OSError:
                    return True, b""
            pl.unlock(fh)
            return False, b""

    def _inspect(self) -> tuple[HolderState, OwnerRecord | None]:
        if self.held and self._record is not None:
            return "held", self._record
        data = b""
        rec: OwnerRecord | None = None
        delay = ownerlock.POLL_START
        for attempt in range(_VERIFY_RETRIES + 1):
            probed = self._probe()
            if probed is None or not probed[0]:
                return "free", None
            data = probed[1]
            rec = OwnerRecord.from_json(data)
            if rec is not None and _identity_is_live(rec):
                return "held", attrs.evolve(rec, verified=True)
            if attempt < _VERIFY_RETRIES:
                time.sleep(delay)
                delay = min(delay * 2, ownerlock.POLL_MAX)
        if rec is None:
            rec = OwnerRecord(pid=_salvage_pid(data), identity="", home="", role=self.role,
                              acquired_at=0.0)
        return "held-unverified", rec


def _identity_is_live(rec: OwnerRecord) -> bool:
    from firstmate.store.identity import ProcessIdentity, matches

    ident = ProcessIdentity.parse(rec.identity)
    return ident is not None and ident.pid == rec.pid and matches(ident)


__all__ = ["FileLock", "HolderState", "OwnerRecord"]
