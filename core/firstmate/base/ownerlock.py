"""Take a kernel lock on a state file and write its owner record, as plain functions over fds.

The attrs-free core of :class:`firstmate.store.locks.FileLock` (which uses it for its blocking POSIX
acquisition and for every owner record it writes) and of the ``fm wake append`` fast path. The
record format is :func:`record_json`: the same JSON ``FileLock.holder()`` parses, so whoever
waits on a lock taken here can name its holder.
"""

from __future__ import annotations

import fcntl
import os
import time

from firstmate.base.envnum import finite
from firstmate.base.procself import current_token
from firstmate.base.safepaths import open_private, state_error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from firstmate.base.safepaths import StrPath

#: (pid, identity token, acquired_at): the record fields this process wrote.
Written = tuple[int, str, float]
#: A bounded wait polls with a delay that doubles from the first value up to the second.
POLL_START = 0.001
POLL_MAX = 0.05


def _json_str(text: str) -> str:
    # Printable ASCII without quotes or backslashes is its own JSON encoding; anything else goes
    # through json (imported only then) so the record is always exactly json.dumps's.
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    import json

    return json.dumps(text)


def _json_float(value: float) -> str:
    if finite(value):
        return repr(float(value))
    import json

    return json.dumps(value)


def record_json(pid: int, identity: str, home: str, role: str, acquired_at: float) -> str:
    """The owner record: ``json.dumps`` of its fields with ``sort_keys=True``."""
    return (
        f'{{"acquired_at": {_json_float(acquired_at)}, "home": {_json_str(home)}, '
        f'"identity": {_json_str(identity)}, "pid": {int(pid)}, "role": {_json_str(role)}}}'
    )


def write_record(fd: int, path: StrPath, role: str, home: StrPath,
                 token: str | None = None) -> Written:
    """Replace the lock file's contents with this process's owner record (*token*: this
    process's identity token, read from ``/proc/self`` when not given)."""
    pid, identity, at = os.getpid(), token or current_token(), time.time()
    data = record_json(pid, identity, os.fspath(home), role, at).encode()
    try:
        # A released lock file is empty (release clears it): truncated first only when a holder
        # died with its record there, so the usual acquisition changes the file once, not twice.
        if os.fstat(fd).st_size:
            os.ftruncate(fd, 0)
        # No fsync: the record is advice for messages and dies with the kernel lock anyway;
        # syncing it would double the cost of every durable append.
        os.pwrite(fd, data, 0)
    except OSError as exc:
        raise state_error(
            f"cannot write the owner record of {os.fspath(path)}: {exc.strerror}; "
            "check free space and permissions of the state directory"
        ) from exc
    return pid, identity, at


def lock_failed(path: StrPath, exc: object) -> Exception:
    return state_error(
        f"cannot lock {os.fspath(path)}: {exc}; keep the state directory on a local filesystem"
    )


def acquire_recorded(path: StrPath, role: str, home: StrPath,
                     token: str | None = None) -> tuple[int, Written]:
    """Open *path* (0600, never through a symlink), wait for its exclusive ``flock`` as long as
    it takes, and write the owner record. POSIX only. Returns the descriptor and the record."""
    fd = open_private(path, os.O_RDWR | os.O_CREAT)
    try:
        try:
            # One blocking call: the kernel wakes us as soon as the holder releases or dies.
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            raise lock_failed(path, exc) from exc
        return fd, write_record(fd, path, role, home, token)
    except BaseException:
        os.close(fd)
        raise


def poll(attempt: Callable[[], bool], bound: float) -> bool:
    """Call *attempt* until it says True (True) or *bound* seconds ran out (False): the one
    bounded wait of every lock, with a delay that doubles from :data:`POLL_START` to
    :data:`POLL_MAX` between tries. It tries at least once."""
    deadline = time.monotonic() + bound
    delay = POLL_START
    while not attempt():
        now = time.monotonic()
        if now >= deadline:
            return False
        time.sleep(min(delay, deadline - now))
        delay = min(delay * 2, POLL_MAX)
    return True


def try_acquire(path: StrPath, role: str, home: StrPath, bound: float = 0.0) -> int | None:
    """:func:`acquire_recorded` within *bound* seconds (0: only if nobody holds it now, else
    :func:`poll`); None when it stayed held. Returns the descriptor (release with
    :func:`release`)."""
    fd = open_private(path, os.O_RDWR | os.O_CREAT)
    try:
        def attempt() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            except OSError as exc:
                raise lock_failed(path, exc) from exc
            return True

        if not poll(attempt, bound):
            os.close(fd)
            return None
        write_record(fd, path, role, home)
    except BaseException:
        os.close(fd)
        raise
    return fd


def flock_with_record(path: StrPath, role: str, home: StrPath) -> int:
    """:func:`acquire_recorded`, returning only the descriptor (release with :func:`release`)."""
    return acquire_recorded(path, role, home)[0]


def release(fd: int) -> None:
    """Clear the record (a free lock file never names a past holder), unlock and close."""
    try:
        try:  # noqa: SIM105 - contextlib costs the fast path an import
            os.ftruncate(fd, 0)
        except OSError:
            pass
        try:  # noqa: SIM105
            fcntl.flock(fd, fcntl.LOCK_UN)  # closing the descriptor releases it anyway
        except OSError:
            pass
    finally:
        os.close(fd)


__all__ = ["POLL_MAX", "POLL_START", "acquire_recorded", "flock_with_record", "lock_failed", "poll",
           "record_json", "release", "try_acquire", "write_record"]
