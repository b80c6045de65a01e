"""Who a process is: pid + start time + command-line hash, and its ancestry.

A pid alone is not an identity: the kernel hands pids out again. A recorded
:class:`ProcessIdentity` whose start time or command line no longer matches the live process is
a *reused* pid; it is never signalled and never trusted as a lock holder.

What a process is, whether it runs and whether it is still the one recorded are
:mod:`firstmate.base.proctoken`'s, read from ``/proc``; this module wraps them in attrs values
and asks psutil (imported lazily) only where ``/proc`` cannot tell: another platform, or a
process it cannot read. The ancestry walk and the signalling are this module's own.
"""

from __future__ import annotations

import contextlib
import os
import signal
from types import ModuleType

import attrs

from firstmate.base import procself, proctoken
from firstmate.base.pidfd import open_pidfd
from firstmate.base.procself import CMD_HASH_LEN, cmd_hash

#: Parent steps :func:`ancestry` takes by default.
DEFAULT_MAX_HOPS = 16


def _psutil() -> ModuleType:
    import psutil

    return psutil


@attrs.frozen
class ProcessIdentity:
    """One process, told apart from any later process that reuses its pid."""

    pid: int
    #: psutil ``create_time`` (seconds since the epoch); compared to 1/100 s.
    started: float
    #: Short sha256 hex of the NUL-joined command line.
    cmd_hash: str

    def token(self) -> str:
        if self is _current_cache:  # (this process's own: made once, an append names it each time)
            return _current_token(self)
        return procself.token(self.pid, self.started, self.cmd_hash)

    @classmethod
    def parse(cls, token: object) -> ProcessIdentity | None:
        """The identity a :meth:`token` string names, or None when it is malformed."""
        fields = proctoken.parse(token)
        return None if fields is None else cls(*fields)

    def fields(self) -> procself.Fields:
        return self.pid, self.started, self.cmd_hash

    def same_as(self, other: ProcessIdentity) -> bool:
        """True when both name the same process (start times compared as their tokens show them)."""
        return proctoken.same(self.fields(), other.fields())


def identity_of(pid: int) -> ProcessIdentity | None:
    """The live identity of *pid*; None when it is dead, a zombie, or cannot be read."""
    if pid <= 0:
        return None
    state, fields = proctoken.look(pid)
    if state is not None:
        return None if fields is None else ProcessIdentity(*fields)
    return psutil_identity(pid)


def psutil_identity(pid: int) -> ProcessIdentity | None:
    """:func:`identity_of` as psutil reads it: the fallback where ``/proc`` cannot tell."""
    psutil = _psutil()
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            started = float(proc.create_time())
            cmdline = list(proc.cmdline())
    except (psutil.Error, OSError):
        return None
    return ProcessIdentity(pid=pid, started=started, cmd_hash=cmd_hash(cmdline))


_current_cache: ProcessIdentity | None = None
_token_cache: tuple[ProcessIdentity, str] | None = None


def _current_token(identity: ProcessIdentity) -> str:
    global _token_cache
    cached = _token_cache  # (read once: threads may replace it)
    if cached is None or cached[0] is not identity:
        cached = _token_cache = (identity, procself.token(identity.pid, identity.started,
                                                          identity.cmd_hash))
    return cached[1]


def current() -> ProcessIdentity:
    """This process's identity (cached per pid, so it stays right after a fork)."""
    global _current_cache
    pid = os.getpid()
    cached = _current_cache
    if cached is not None and cached.pid == pid:
        return cached
    fields = procself.current_fields()
    found = ProcessIdentity(*fields) if fields is not None else identity_of(pid)
    if found is None:  # pragma: no cover - our own process is always readable
        raise RuntimeError("cannot read this process's own start time and command line")
    _current_cache = found
    return found


def is_alive(pid: int) -> bool:
    """True when *pid* names a running process; a zombie counts as dead."""
    state = proctoken.alive(pid)
    if state is not None:
        return state
    psutil = _psutil()
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.AccessDenied:
        return True
    except (psutil.Error, OSError):
        return False


def matches(identity: ProcessIdentity) -> bool:
    """True when the recorded process still runs: same pid, start time and command line."""
    state = proctoken.running(identity.fields())
    if state is not None:
        return state
    live = identity_of(identity.pid)
    return live is not None and live.same_as(identity)


def signal_verified(identity: ProcessIdentity, sig: int | signal.Signals) -> bool:
    """Send *sig* only to the very process *identity* names. Returns whether it was sent.

    On Linux the process is pinned with a pidfd before it is verified, so a pid that dies and is
    reused between the check and the send cannot receive the signal.
    """
    if identity.pid <= 0:
        return False
    pidfd = open_pidfd(identity.pid, for_signals=True, gone=-1)
    if pidfd == -1:
        return False
    try:
        if not matches(identity):
            return False
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, sig)
            else:
                os.kill(identity.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


@attrs.frozen
class ProcInfo:
    """A snapshot of one process in an ancestry walk."""

    pid: int
    ppid: int
    name: str
    cmdline: tuple[str, ...] = ()
    exe: str = ""


def proc_info(pid: int) -> ProcInfo | None:
    """A snapshot of *pid*, or None when it is gone. Unreadable fields are left empty."""
    psutil = _psutil()
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            ppid = int(proc.ppid())
            name = str(proc.name())
            cmdline: tuple[str, ...] = ()
            exe = ""
            unreadable = (psutil.AccessDenied, psutil.ZombieProcess, OSError)
            with contextlib.suppress(*unreadable):
                cmdline = tuple(str(a) for a in proc.cmdline())
            with contextlib.suppress(*unreadable):
                exe = str(proc.exe() or "")
    except (psutil.Error, OSError):
        return None
    return ProcInfo(pid=pid, ppid=ppid, name=name, cmdline=cmdline, exe=exe)


def ancestry(pid: int | None = None, max_hops: int = DEFAULT_MAX_HOPS) -> list[ProcInfo]:
    """*pid* (default: this process) and its ancestors, innermost first.

    At most ``max_hops`` parent steps are taken; the walk stops at pid 1 (or 0) and ends early,
    keeping what it has, when a process vanishes mid-walk.
    """
    cur = os.getpid() if pid is None else pid
    chain: list[ProcInfo] = []
    seen: set[int] = set()
    while cur > 0 and cur not in seen and len(chain) <= max(max_hops, 0):
        info = proc_info(cur)
        if info is None:
            break
        chain.append(info)
        seen.add(cur)
        if cur == 1:
            break
        cur = info.ppid
    return chain


__all__ = [
    "CMD_HASH_LEN",
    "ProcInfo",
    "ProcessIdentity",
    "ancestry",
    "cmd_hash",
    "current",
    "identity_of",
    "is_alive",
    "matches",
    "proc_info",
    "psutil_identity",
    "signal_verified",
]
