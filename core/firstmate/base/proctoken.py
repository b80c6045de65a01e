"""Identity tokens of other processes (``pid:start:cmdhash``): parse, compare, and check one
against ``/proc`` without psutil.

The plain-value half of :class:`firstmate.store.identity.ProcessIdentity` (which parses and
compares through these functions) for paths that must start fast, such as ``fm status``.
:func:`running` answers only what ``/proc`` can prove; where it cannot (another platform, an
unreadable process) it says so, and the caller asks psutil through the store.
"""

from __future__ import annotations

import sys

from firstmate.base.envnum import finite
from firstmate.base.procself import Fields, from_proc

_HEX = frozenset("0123456789abcdef")


def _digits(text: str, most: int) -> bool:
    # [0-9]{1,most} without importing re (str.isdigit alone accepts other scripts' digits).
    return 0 < len(text) <= most and text.isascii() and text.isdigit()


def parse(token: object) -> Fields | None:
    """The ``(pid, started, cmd_hash)`` a token names, or None when it is malformed (a full
    match of ``[0-9]{1,10}:[0-9]{1,15}(\\.[0-9]{1,9})?:[0-9a-f]{8,64}`` after stripping)."""
    if not isinstance(token, str):
        return None
    parts = token.strip().split(":")
    if len(parts) != 3:
        return None
    pid_text, started_text, digest = parts
    whole, dot, fraction = started_text.partition(".")
    if not (_digits(pid_text, 10) and _digits(whole, 15) and (not dot or _digits(fraction, 9))
            and 8 <= len(digest) <= 64 and _HEX.issuperset(digest)):
        return None
    pid, started = int(pid_text), float(started_text)
    if pid <= 0 or not finite(started):
        return None
    return pid, started, digest


#: How far two readings of one process's start time may differ. Linux gives a start time as
#: ticks since boot plus the boot time in whole seconds, which the kernel derives from the wall
#: clock: as the clock is slewed it moves by a second now and then, so the same process reads a
#: second later or earlier. A new process on a reused pid within that second, with the very same
#: command line, would need the whole pid space to wrap in it.
START_TOLERANCE = 1.011


def close_starts(one: float, other: float) -> bool:
    """Two start times of one process, as tokens (2 decimals) and the kernel give them."""
    return abs(one - other) <= START_TOLERANCE


def same(one: Fields, other: Fields) -> bool:
    """Both name the same process: same pid and command line, start times within
    :data:`START_TOLERANCE`."""
    return one[0] == other[0] and close_starts(one[1], other[1]) and one[2] == other[2]


def _state(pid: int) -> str | None:
    """The one-letter state in ``/proc/<pid>/stat``; "" when there is no such process; None
    when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except (FileNotFoundError, ProcessLookupError):
        return ""
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()
    return fields[0].decode("ascii", "replace") if fields else None


def running(fields: Fields) -> bool | None:
    """True: the process *fields* names still runs (same pid, start time and command line).
    False: proven gone (no such pid, a zombie, or the pid reused). None: ``/proc`` cannot tell
    (not Linux, or the process cannot be read)."""
    if not sys.platform.startswith("linux") or not _digits(str(fields[0]), 10):
        return None
    state = _state(fields[0])
    if state is None:
        return None
    if state in ("", "Z"):
        return False
    if state == "X":
        return None  # dying as we look: let the careful path decide
    live = from_proc(fields[0])
    return None if live is None else same(live, fields)


__all__ = ["START_TOLERANCE", "close_starts", "parse", "running", "same"]
