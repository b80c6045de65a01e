"""Opening a pidfd: a handle that pins one process, so a reused pid can never be signalled or
waited on in its place (Linux 5.3+; elsewhere callers fall back to the pid)."""

from __future__ import annotations

import os
import signal


def open_pidfd(pid: int, *, for_signals: bool = False, gone: int | None = None) -> int | None:
    """A pidfd for *pid*, or *gone* when no process has that pid, or None when pidfds are not
    available here (with *for_signals*: when ``signal.pidfd_send_signal`` is not either) or the
    process cannot be opened."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None or (for_signals and not hasattr(signal, "pidfd_send_signal")):
        return None
    try:
        return int(opener(pid))
    except ProcessLookupError:
        return gone
    except OSError:
        return None


__all__ = ["open_pidfd"]
