"""Who a process is: pid + start time + command-line hash, and which harness it belongs to.

A pid alone is not an identity: the kernel hands pids out again. A recorded
:class:`ProcessIdentity` whose start time or command line no longer matches the live process is
a *reused* pid; it is never signalled and never trusted as a lock holder.

psutil is imported lazily: :func:`current` reads ``/proc/self`` directly on Linux so that taking
a lock on a hot command path does not pay for importing psutil.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
from collections.abc import Iterable, Mapping, Sequence
from types import ModuleType

import attrs

from firstmate import procself
from firstmate.procself import CMD_HASH_LEN, cmd_hash

#: Parent steps :func:`ancestry` takes by default.
DEFAULT_MAX_HOPS = 16
#: Extra harness process basenames, comma-separated (for tests and unusual installs).
HARNESS_NAMES_ENV = "FM_HARNESS_PROCESS_NAMES"

_TOKEN = re.compile(r"([0-9]{1,10}):([0-9]{1,15}(?:\.[0-9]{1,9})?):([0-9a-f]{8,64})")


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
        return procself.token(self.pid, self.started, self.cmd_hash)

    @classmethod
    def parse(cls, token: object) -> ProcessIdentity | None:
        """The identity a :meth:`token` string names, or None when it is malformed."""
        if not isinstance(token, str):
            return None
        m = _TOKEN.fullmatch(token.strip())
        if m is None:
            return None
        pid, started = int(m.group(1)), float(m.group(2))
        if pid <= 0 or not math.isfinite(started):
            return None
        return cls(pid=pid, started=started, cmd_hash=m.group(3))

    def same_as(self, other: ProcessIdentity) -> bool:
        """True when both name the same process (start times compared as their tokens show them)."""
        return (
            self.pid == other.pid
            and f"{self.started:.2f}" == f"{other.started:.2f}"
            and self.cmd_hash == other.cmd_hash
        )


def identity_of(pid: int) -> ProcessIdentity | None:
    """The live identity of *pid*; None when it is dead, a zombie, or cannot be read."""
    if pid <= 0:
        return None
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
    if pid <= 0:
        return False
    psutil = _psutil()
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.AccessDenied:
        return True
    except (psutil.Error, OSError):
        return False


def matches(identity: ProcessIdentity) -> bool:
    """True when the recorded process still runs: same pid, start time and command line."""
    live = identity_of(identity.pid)
    return live is not None and live.same_as(identity)


def signal_verified(identity: ProcessIdentity, sig: int | signal.Signals) -> bool:
    """Send *sig* only to the very process *identity* names. Returns whether it was sent.

    On Linux the process is pinned with a pidfd before it is verified, so a pid that dies and is
    reused between the check and the send cannot receive the signal.
    """
    if identity.pid <= 0:
        return False
    pidfd = _pidfd_open(identity.pid)
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


def _pidfd_open(pid: int) -> int | None:
    """A pidfd for *pid*; -1 when the process is already gone; None when pidfds are unavailable."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None or not hasattr(signal, "pidfd_send_signal"):
        return None
    try:
        return int(opener(pid))
    except ProcessLookupError:
        return -1
    except OSError:
        return None


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


# --- harness detection -----------------------------------------------------------------------

@attrs.frozen
class HarnessTable:
    """How to tell a harness process by its command line: what each installed harness plugin
    declares in its :class:`~firstmate.harness.HarnessInfo` (core knows no harness itself)."""

    #: Program basenames that are a harness themselves (basename -> harness).
    names: Mapping[str, str] = attrs.field(factory=dict)
    #: Consecutive path components that mark a script as a harness's own code.
    markers: tuple[tuple[tuple[str, ...], str], ...] = ()
    #: ``python -m <module>`` modules that are a harness.
    modules: Mapping[str, str] = attrs.field(factory=dict)
    #: (harness, pid variable, session-id variable) of each harness that vouches for its
    #: session in its hooks' environment.
    anchors: tuple[tuple[str, str, str], ...] = ()

    @classmethod
    def of(cls, infos: Iterable[object]) -> HarnessTable:
        names: dict[str, str] = {}
        markers: list[tuple[tuple[str, ...], str]] = []
        modules: dict[str, str] = {}
        anchors: list[tuple[str, str, str]] = []
        for info in infos:
            harness = str(getattr(info, "name", ""))
            names.update({n: harness for n in getattr(info, "process_names", ())})
            markers += [(tuple(m), harness) for m in getattr(info, "package_markers", ())]
            modules.update({m: harness for m in getattr(info, "python_modules", ())})
            anchor = getattr(info, "session_anchor", None)
            if anchor is not None:
                anchors.append((harness, anchor.pid_env, anchor.session_env))
        return cls(names, tuple(markers), modules, tuple(anchors))

    def with_extra(self, env: Mapping[str, str]) -> HarnessTable:
        """This table plus ``FM_HARNESS_PROCESS_NAMES`` (each name its own harness)."""
        extra = {n.strip(): n.strip() for n in env.get(HARNESS_NAMES_ENV, "").split(",")
                 if n.strip()}
        return attrs.evolve(self, names={**extra, **self.names}) if extra else self


_TABLES: dict[str, HarnessTable] = {}


def harness_table(env: Mapping[str, str] | None = None, *, only: str = "") -> HarnessTable:
    """The table of the installed harness plugins (loaded once per process and plugin
    selection), plus ``FM_HARNESS_PROCESS_NAMES``. With *only*, just that harness's, asking
    only its own plugin (no entry-point scan: the cheap way to check one recorded holder)."""
    env = os.environ if env is None else env
    from firstmate.names import DISABLE_PLUGINS_ENV, PLUGINS_ENV

    selection = (f"{env.get(PLUGINS_ENV, '')}|{env.get(DISABLE_PLUGINS_ENV, '')}"
                 f"|{only}")
    table = _TABLES.get(selection)
    if table is None:
        from firstmate.plugins import load, load_harness

        try:
            infos = (load_harness(only, env) if only else load(env, core=False)).harnesses()
        except Exception:  # a missing or broken plugin must not make every process unknown
            infos = []
        table = _TABLES[selection] = HarnessTable.of(
            [i for i in infos if not only or getattr(i, "name", "") == only])
    return table.with_extra(env)


_INTERPRETER = re.compile(r"(node|nodejs|bun|deno|tsx|python(\d+(\.\d+)?)?|pypy3?)")
_EVAL_OPTIONS = frozenset({"-c", "-e", "-p", "--eval", "--print"})
_VALUE_OPTIONS = frozenset(
    {"-r", "--require", "--import", "--loader", "--experimental-loader", "-X", "-W",
     "--title", "--env-file", "--preload", "--cwd", "--config"}
)
_SUBCOMMANDS = frozenset({"run"})


def _parts(path: str) -> list[str]:
    return [p for p in re.split(r"[\\/]+", path) if p]


def _base(path: str) -> str:
    parts = _parts(path)
    base = parts[-1] if parts else ""
    return base[:-4] if base.lower().endswith(".exe") else base


def _versioned(parts: Sequence[str], names: Mapping[str, str]) -> str | None:
    # A versioned install: ``…/<name>/versions/2.1.220``, ``…/<name>/versions/<v>/node``.
    for i in range(len(parts) - 2):
        if parts[i + 1] == "versions" and parts[i] in names:
            return names[parts[i]]
    return None


def _script_harness(script: str, table: HarnessTable) -> str | None:
    names = table.names
    parts = _parts(script)
    if not parts:
        return None
    if parts[-1] in names:
        return names[parts[-1]]
    for marker, harness in table.markers:
        n = len(marker)
        if any(tuple(parts[i : i + n]) == marker for i in range(len(parts) - n + 1)):
            return harness
    return _versioned(parts, names)


def _interpreted_harness(args: Iterable[str], table: HarnessTable) -> str | None:
    """The harness an interpreter command line runs (``node …/cli.js``, ``python -m <module>``)."""
    it = iter(args)
    for arg in it:
        if arg in _EVAL_OPTIONS:
            return None
        if arg == "-m":
            module = next(it, "").split(".")[0]
            return table.modules.get(module)
        if arg in _VALUE_OPTIONS:
            next(it, None)
            continue
        if arg.startswith("-") or arg in _SUBCOMMANDS:
            continue
        return _script_harness(arg, table)
    return None


def harness_of(info: ProcInfo, env: Mapping[str, str] | None = None,
               table: HarnessTable | None = None) -> str | None:
    """Which harness *info* is, by the *table* (default: what the installed plugins declare,
    :func:`harness_table`), or None.

    Names are matched as whole basenames or path components, never as substrings, so a
    harness named ``pi`` does not match ``pip``, ``pipx`` or ``api-server``.
    """
    table = harness_table(env) if table is None else table
    names = table.names
    argv0 = info.cmdline[0] if info.cmdline else ""
    programs = [b for b in (info.name, _base(argv0), _base(info.exe)) if b]
    for base in programs:
        if base in names:
            return names[base]
    for path in (info.exe, argv0):
        found = _versioned(_parts(path), names) if path else None
        if found:
            return found
    if any(_INTERPRETER.fullmatch(b) for b in programs):
        return _interpreted_harness(info.cmdline[1:], table)
    return None


def innermost_harness(
    pid: int | None = None, max_hops: int = DEFAULT_MAX_HOPS
) -> ProcInfo | None:
    """The closest process in *pid*'s ancestry (itself included) that is a harness."""
    env = dict(os.environ)
    for info in ancestry(pid, max_hops):
        if harness_of(info, env) is not None:
            return info
    return None


__all__ = [
    "CMD_HASH_LEN",
    "HARNESS_NAMES_ENV",
    "HarnessTable",
    "ProcInfo",
    "ProcessIdentity",
    "ancestry",
    "cmd_hash",
    "current",
    "harness_of",
    "harness_table",
    "identity_of",
    "innermost_harness",
    "is_alive",
    "matches",
    "proc_info",
    "signal_verified",
]
