"""This process's identity token (pid + start time + command-line hash), read from ``/proc``.

The plain-value half of :mod:`firstmate.store.identity`: the Linux fast path that reads our own start
time and command line without psutil, and the token format. It imports neither attrs nor psutil
so that taking a lock on ``fm wake append`` stays cheap.
"""

from __future__ import annotations

import os
import sys

from firstmate.base.fasthash import sha256_hex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

#: Digits of the sha256 hex digest kept in an identity's command hash (64 bits).
CMD_HASH_LEN = 16

#: (pid, started, cmd_hash): the fields of :class:`firstmate.store.identity.ProcessIdentity`.
Fields = tuple[int, float, str]


def cmd_hash(cmdline: Sequence[str]) -> str:
    joined = "\0".join(cmdline).encode("utf-8", "surrogateescape")
    return sha256_hex(joined)[:CMD_HASH_LEN]


def token(pid: int, started: float, digest: str) -> str:
    return f"{pid}:{started:.2f}:{digest}"


def split_cmdline(data: str) -> list[str]:
    # Mirrors psutil's Linux parsing so both paths hash the same argument list.
    if not data:
        return []
    sep = "\0" if data.endswith("\0") else " "
    if data.endswith(sep):
        data = data[:-1]
    parts = data.split(sep)
    if sep == "\0" and len(parts) == 1 and " " in data:
        parts = data.split(" ")
    return parts


def from_proc(pid: int) -> Fields | None:
    """Linux fast path: the same numbers psutil computes, without importing psutil."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        with open("/proc/stat", "rb") as fh:
            btime = next(
                float(line.split()[1]) for line in fh if line.startswith(b"btime")
            )
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
        ticks = float(stat[stat.rfind(b")") + 2 :].split()[19])
        clk = os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    return pid, ticks / clk + btime, cmd_hash(split_cmdline(os.fsdecode(raw)))


_cached: Fields | None = None


def current_fields() -> Fields | None:
    """:func:`from_proc` for this process, cached per pid (so it stays right after a fork)."""
    global _cached
    pid = os.getpid()
    if _cached is None or _cached[0] != pid:
        _cached = from_proc(pid)
    return _cached


class ProcUnavailable(OSError):
    """``/proc/self`` cannot be read (not Linux, or a restricted mount): the caller falls back to
    :func:`firstmate.store.identity.current`, which asks psutil."""


def current_token() -> str:
    """This process's identity token (what ``identity.current().token()`` gives), from
    ``/proc/self``; :class:`ProcUnavailable` when that cannot be read."""
    found = current_fields()
    if found is None:
        raise ProcUnavailable("cannot read /proc/self")
    return token(*found)


__all__ = ["CMD_HASH_LEN", "ProcUnavailable", "cmd_hash", "current_fields", "current_token", "from_proc", "split_cmdline", "token"]
