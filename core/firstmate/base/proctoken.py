"""Identity tokens of other processes (``pid:start:cmdhash``): parse, compare, and check one
against ``/proc`` without psutil.

The one implementation of a process's identity: :mod:`firstmate.store.identity` wraps these
functions in its ``ProcessIdentity`` class and asks psutil only where they answer None.
:func:`look`, :func:`alive`, :func:`running` and :func:`owner_state` answer only what ``/proc``
can prove; where it cannot (another platform, an unreadable or dying process) they say so (None),
and a short command hands over to the full path, which asks psutil.
"""

from __future__ import annotations

import sys

from firstmate.base.envnum import finite
from firstmate.base.procself import Fields, from_proc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    #: Whether a recorded process still runs, as far as ``/proc`` can prove it.
    Owner = Literal["live", "gone"]

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


def alive(pid: int) -> bool | None:
    """True: *pid* names a running process. False: proven not (no such pid, or a zombie).
    None: ``/proc`` cannot tell (not Linux, unreadable, or dying as we look)."""
    if pid <= 0:
        return False
    if not sys.platform.startswith("linux") or not _digits(str(pid), 10):
        return None
    state = _state(pid)
    if state is None or state == "X":  # (X: dying as we look; let the careful path decide)
        return None
    return state not in ("", "Z")


def look(pid: int) -> tuple[bool | None, Fields | None]:
    """What ``/proc`` says of *pid*: ``(True, fields)`` running, its identity read; ``(False,
    None)`` proven not running; ``(None, None)`` it cannot tell."""
    state = alive(pid)
    if state is not True:
        return state, None
    live = from_proc(pid)
    return (None, None) if live is None else (True, live)


def running(fields: Fields) -> bool | None:
    """True: the process *fields* names still runs (same pid, start time and command line).
    False: proven gone (no such pid, a zombie, or the pid reused). None: ``/proc`` cannot tell
    (not Linux, or the process cannot be read)."""
    state, live = look(fields[0])
    return state if live is None else same(live, fields)


def owner_state(pid: int, identity: str) -> Owner | None:
    """``live`` or ``gone``: whether the process recorded as *pid* with the token *identity*
    (a grant's owner, a lock's holder) still runs; a token that is malformed or names another
    pid is ``gone``. None: ``/proc`` cannot tell."""
    recorded = parse(identity)
    if recorded is None or recorded[0] != pid:
        return "gone"
    state = running(recorded)
    return None if state is None else "live" if state else "gone"


__all__ = ["START_TOLERANCE", "alive", "close_starts", "look", "owner_state", "parse", "running",
           "same"]
