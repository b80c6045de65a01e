"""Is a state lock held, and what does its owner record say? One look, with ``fcntl.flock``.

The POSIX probe of :meth:`firstmate.store.locks.FileLock.holder` in a short command, as a plain
function (``fm status`` calls it without importing the lock classes). A shared, non-blocking lock
never conflicts with another prober: it only tests for a holder, and is dropped at once.
"""

from __future__ import annotations

import os

from firstmate.base.safepaths import open_private

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate.base.safepaths import StrPath

#: An owner record is small; anything longer than this is garbage.
RECORD_MAX = 64 * 1024


def probe(path: StrPath) -> tuple[bool, bytes] | None:
    """``(held, record bytes)``; None when the lock file does not exist (so nobody holds it).
    An unsafe or unopenable lock file raises the :class:`~firstmate.base.errors.StateError` of
    :func:`~firstmate.base.safepaths.open_private`; a failing lock call, that of
    :func:`~firstmate.base.ownerlock.lock_failed`."""
    import fcntl

    try:
        fd = open_private(path, os.O_RDONLY)
    except Exception as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            return None
        raise
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return True, os.read(fd, RECORD_MAX)
            except OSError:
                return True, b""
        except OSError as exc:
            from firstmate.base.ownerlock import lock_failed

            raise lock_failed(path, exc) from exc
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False, b""
    finally:
        os.close(fd)


__all__ = ["RECORD_MAX", "probe"]
