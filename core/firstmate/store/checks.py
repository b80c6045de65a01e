"""Registered state checks: commands the watcher runs on a cadence, bound to their definitions.

``fm check add NAME -- CMD…`` stores ``state/checks/NAME.json`` = {name, argv, cwd, added_at}
plus ``mac``, an HMAC-SHA256 of the rest keyed by the home's secret, which lives outside the
home (:mod:`firstmate.base.keyring`). Anything in ``state/checks/`` that is not such a file with a
valid MAC, owned by you and writable by nobody else (edited by hand, dropped there by another
tool, copied, cloned or committed from another home) is *rejected*: never run, and reported
once per distinct set as ``check: rejected unauthenticated state checks: <names>``.

Contract of a check run (each in its own session/process group, ``FM_CHECK_TIMEOUT``):

* exit 0, no output on stdout → nothing to report (absorbed);
* exit 0, output → ``check: <name>: <first non-blank stdout line>``;
* non-zero exit → ``check: <name>: failed (exit <N>)[: <first line of stdout, else stderr>]``;
* killed by a signal → ``check: <name>: failed (signal <SIG>)[: …]``;
* over time → the whole group gets TERM, then KILL after 1 s: ``check: <name>: timed out after <T>s``;
* cannot start → ``check: <name>: could not start: <error>``.

When the leader exits, whatever is left of its process group is killed: a check must not leave
processes behind. :func:`kill_running` kills every group currently running (the watcher's
cleanup calls it on HUP/INT/TERM).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import selectors
import signal
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from firstmate.base import keyring
from firstmate.base.errors import ConflictError, StateError, UsageError
from firstmate.base.pidfd import open_pidfd
from firstmate.base.trust import untrusted
from firstmate.store import crew as crewmod
from firstmate.store.home import Home, atomic_write, make_private_dir

DEFINITION_VERSION = 1
REJECTED_KEY = "unauthenticated-state-checks"
#: Most bytes kept from a check's stdout / stderr (the rest is read and discarded).
MAX_STDOUT = 65536
MAX_STDERR = 16384
REASON_TEXT_BYTES = 1000
#: Seconds between TERM and KILL for a check that overran its timeout.
KILL_GRACE = 1.0


def checks_dir(home: Home) -> Path:
    return home.state / "checks"


def state_path(home: Home) -> Path:
    return home.state / "check-state.json"


def wake_key(name: str) -> str:
    """The queue key of a check's rows."""
    return f"check:{name}"


@attrs.frozen
class CheckDef:
    name: str
    argv: tuple[str, ...]
    cwd: str
    added_at: float

    def body(self) -> dict[str, object]:
        return {"version": DEFINITION_VERSION, "name": self.name, "argv": list(self.argv),
                "cwd": self.cwd, "added_at": self.added_at}


@attrs.frozen
class Rejected:
    """An entry of ``state/checks/`` that failed authentication."""

    name: str
    why: str
    fingerprint: str


# --- the secret and the MAC ------------------------------------------------------------------


def _read_key(home: Home, env: Mapping[str, str] | None) -> bytes | None:
    return keyring.read_key(str(home.root), os.environ if env is None else env)


def _key(home: Home, env: Mapping[str, str] | None) -> bytes:
    """The home's secret, created on first use (outside the home: see :mod:`firstmate.base.keyring`)."""
    return keyring.ensure_key(str(home.root), os.environ if env is None else env)


# --- registry --------------------------------------------------------------------------------


def validate_name(name: str) -> str:
    if not crewmod.NAME_RE.fullmatch(name or ""):
        raise UsageError(
            f"invalid check name {name!r}: use 1-64 characters from A-Z a-z 0-9 . _ - (not starting with .)"
        )
    return name


def definition_path(home: Home, name: str) -> Path:
    return checks_dir(home) / f"{name}.json"


def add(home: Home, name: str, argv: Sequence[str], *, cwd: str | None = None,
        replace: bool = False, now: float | None = None,
        env: Mapping[str, str] | None = None) -> CheckDef:
    """Register check *name* running *argv* in *cwd* (default: the current directory)."""
    validate_name(name)
    argv = tuple(argv)
    if not argv or not argv[0]:
        raise UsageError(f"missing command: run fm check add {name} -- COMMAND [ARGS...]")
    if any("\0" in arg for arg in argv):
        raise UsageError("a check argument contains a NUL byte")
    where = os.path.abspath(cwd if cwd is not None else os.getcwd())
    make_private_dir(home.state)
    make_private_dir(checks_dir(home))
    target = definition_path(home, name)
    if os.path.lexists(target) and not replace:
        raise ConflictError(f"check {name!r} already exists; pass --replace or run fm check remove {name} first")
    definition = CheckDef(name, argv, where, round(time.time() if now is None else now, 3))
    body = definition.body()
    record = {**body, "mac": keyring.mac(_key(home, env), body)}
    atomic_write(target, (json.dumps(record, indent=1) + "\n").encode())
    from firstmate.store import doorbell

    doorbell.ring(home)
    return definition


def remove(home: Home, name: str) -> None:
    """Delete check *name*'s definition, authenticated or not (a rejected entry by its listed name)."""
    if not name or "/" in name or "\0" in name or name.startswith("."):
        raise UsageError(f"invalid check name {name!r}")
    for candidate in (checks_dir(home) / f"{name}.json", checks_dir(home) / name):
        try:
            os.unlink(candidate)
            return
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StateError(f"cannot remove {candidate}: {exc.strerror}; remove it by hand") from exc
    raise UsageError(f"no check named {name!r}; fm check list shows the registered ones")


def load(home: Home, env: Mapping[str, str] | None = None) -> tuple[list[CheckDef], list[Rejected]]:
    """Every authenticated definition and every rejected entry, each sorted by name."""
    try:
        entries = sorted(os.listdir(checks_dir(home)))
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        raise StateError(f"cannot list {checks_dir(home)}: {exc.strerror}") from exc
    key = _read_key(home, env)
    valid: list[CheckDef] = []
    rejected: list[Rejected] = []
    for entry in entries:
        if entry.startswith("."):
            continue  # our own temporary files; hidden entries are never run either
        name = entry[: -len(".json")] if entry.endswith(".json") else entry
        data, why = _read_entry(checks_dir(home) / entry)
        fingerprint = hashlib.sha256(data or b"").hexdigest()[:16]
        if why is None:
            definition, why = _authenticate(name, data or b"", key)
            if definition is not None:
                valid.append(definition)
                continue
        rejected.append(Rejected(name, why or "unreadable", fingerprint))
    return valid, rejected


def _read_entry(p: Path) -> tuple[bytes | None, str | None]:
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return None, "vanished"
    if stat.S_ISLNK(st.st_mode):
        return None, "symlink"
    if not stat.S_ISREG(st.st_mode):
        return None, "not a regular file"
    foreign = untrusted(st)
    if foreign is not None:
        return None, foreign
    if not p.name.endswith(".json"):
        return None, "not a definition file"
    if st.st_size > 1 << 20:
        return None, "too large"
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        return None, exc.strerror or "unreadable"
    with os.fdopen(fd, "rb") as fh:
        return fh.read(), None


def _authenticate(name: str, data: bytes, key: bytes | None) -> tuple[CheckDef | None, str | None]:
    if key is None:
        return None, "this home has no secret of yours (registered elsewhere?)"
    try:
        record = json.loads(data)
    except ValueError:
        return None, "not JSON"
    if not isinstance(record, dict):
        return None, "not a definition"
    claimed = record.pop("mac", None)
    if not keyring.verify_mac(key, record, claimed):
        return None, "definition hash does not match"
    argv, cwd, added = record.get("argv"), record.get("cwd"), record.get("added_at")
    if (record.get("name") != name or record.get("version") != DEFINITION_VERSION
            or not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv)
            or not isinstance(cwd, str) or not isinstance(added, int | float)):
        return None, "malformed definition"
    return CheckDef(name, tuple(argv), cwd, float(added)), None


# --- watcher-owned run state -----------------------------------------------------------------


@attrs.frozen
class RunState:
    last_run: dict[str, float] = attrs.field(factory=dict)
    #: Fingerprint of the rejected set already reported ("" when none was).
    rejected: str = ""


def read_state(home: Home) -> RunState:
    text = crewmod.read_text(state_path(home), 1 << 20)
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return RunState()
    if not isinstance(data, dict):
        return RunState()
    last = data.get("last_run")
    runs = {str(k): float(v) for k, v in last.items() if isinstance(v, int | float)} if isinstance(last, dict) else {}
    rejected = data.get("rejected")
    return RunState(runs, rejected if isinstance(rejected, str) else "")


def write_state(home: Home, state: RunState) -> None:
    data = {"last_run": state.last_run, "rejected": state.rejected}
    atomic_write(state_path(home), (json.dumps(data, sort_keys=True) + "\n").encode())


def rejected_fingerprint(rejected: Sequence[Rejected]) -> str:
    joined = "\n".join(f"{r.name}\t{r.fingerprint}" for r in rejected)
    return hashlib.sha256(joined.encode()).hexdigest()[:32] if rejected else ""


# --- running ---------------------------------------------------------------------------------


@attrs.frozen
class CheckResult:
    name: str
    #: ok | report | failed | timeout | error
    outcome: str
    detail: str = ""
    exit_code: int | None = None

    @property
    def reason(self) -> str | None:
        """The reason line, or None when the check had nothing to report."""
        if self.outcome == "ok":
            return None
        return crewmod.cut(f"check: {self.name}: {self.detail}", REASON_TEXT_BYTES + 80)


#: Running checks by process-group id. Plain dict operations are atomic under the GIL, so a
#: signal handler may read it at any point without a lock (and must never wait for one).
_RUNNING: dict[int, subprocess.Popen[bytes]] = {}
#: True from just before a check is forked until it is in _RUNNING: a signal landing in that
#: window finds the new group by scanning this process's children instead.
_SPAWNING = False


def running_groups() -> list[int]:
    """Process-group ids of the checks running right now."""
    return list(_RUNNING)


def kill_running(sig: int = signal.SIGKILL) -> list[int]:
    """Kill every running check's whole process group. Safe in a signal handler or cleanup."""
    groups = list(_RUNNING)
    if _SPAWNING:
        groups += [pgid for pgid in _session_children() if pgid not in groups]
    for pgid in groups:
        with contextlib.suppress(OSError):
            os.killpg(pgid, sig)
    return groups


def _session_children() -> list[int]:
    """This process's children that lead their own session (how every check is started)."""
    try:
        import psutil

        pids = [child.pid for child in psutil.Process().children()]
    except Exception:  # cleanup must go on even when the process table cannot be read
        return []
    leaders = []
    for pid in pids:
        with contextlib.suppress(OSError):
            if os.getsid(pid) == pid:
                leaders.append(pid)
    return leaders


def _first_line(data: bytes) -> str:
    for raw in data.decode("utf-8", "replace").splitlines():
        line = crewmod.clean_text(raw, REASON_TEXT_BYTES)
        if line:
            return line
    return ""


def run_check(definition: CheckDef, timeout: float, env: Mapping[str, str], home: Home | None = None) -> CheckResult:
    """Run one check to completion or timeout in its own process group; never raises for it."""
    child_env = dict(env)
    child_env["FM_CHECK_NAME"] = definition.name
    if home is not None:
        child_env["FM_HOME"] = str(home.root)
    global _SPAWNING
    # If a signal's handler raises while the child is being forked, _SPAWNING stays set, so
    # the watcher's cleanup (kill_running) still finds and kills the new group.
    _SPAWNING = True
    try:
        proc = subprocess.Popen(
            list(definition.argv), cwd=definition.cwd, env=child_env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
        )
    except OSError as exc:
        _SPAWNING = False
        return CheckResult(definition.name, "error", f"could not start: {exc.strerror or exc}")
    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    _RUNNING[pgid] = proc
    _SPAWNING = False
    try:
        out, err, timed_out = _collect(proc, time.monotonic() + timeout)
        if timed_out:
            _stop_group(proc, pgid)
    finally:
        # Kill what is left of the group while the leader is still unreaped (its pid, which is the
        # group id, cannot be reused until then), then reap it.
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        _RUNNING.pop(pgid, None)
    if timed_out:
        return CheckResult(definition.name, "timeout", f"timed out after {timeout:g}s")
    code = proc.returncode
    line = _first_line(out) or _first_line(err)
    if code == 0:
        stdout_line = _first_line(out)
        return CheckResult(definition.name, "report" if stdout_line else "ok", stdout_line, 0)
    if code < 0:
        try:
            signame = signal.Signals(-code).name
        except ValueError:
            signame = str(-code)
        head = f"failed (signal {signame})"
    else:
        head = f"failed (exit {code})"
    return CheckResult(definition.name, "failed", f"{head}: {line}" if line else head, code)


def _leader_exited(pid: int) -> bool:
    """True once the leader exited, without reaping it (so its pid stays reserved)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


#: How long pipes may stay open after the leader exited (a leftover group member holds them).
PIPE_LINGER = 0.2


def _collect(proc: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, bytes, bool]:
    """Read stdout/stderr (bounded) until the leader exited and the pipes closed, or *deadline*.

    Returns (stdout, stderr, timed_out). Waiting is event-driven: the pipes and, where the kernel
    offers one, a pidfd that turns readable when the leader exits (it is not reaped here).
    """
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    kept = {out_fd: bytearray(), err_fd: bytearray()}
    caps = {out_fd: MAX_STDOUT, err_fd: MAX_STDERR}
    pidfd = open_pidfd(proc.pid)
    exited_at: float | None = None
    open_pipes = {out_fd, err_fd}
    try:
        with selectors.DefaultSelector() as sel:
            for fd in open_pipes:
                os.set_blocking(fd, False)
                sel.register(fd, selectors.EVENT_READ)
            if pidfd is not None:
                sel.register(pidfd, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                if exited_at is None and pidfd is None and _leader_exited(proc.pid):
                    exited_at = now
                if exited_at is not None and (not open_pipes or now - exited_at >= PIPE_LINGER):
                    return bytes(kept[out_fd]), bytes(kept[err_fd]), False
                if now >= deadline:
                    return bytes(kept[out_fd]), bytes(kept[err_fd]), True
                wait = deadline - now
                if exited_at is not None:
                    wait = min(wait, exited_at + PIPE_LINGER - now)
                elif pidfd is None:
                    wait = min(wait, 0.05)  # no pidfd: notice the leader's exit by polling
                for key, _ in sel.select(max(wait, 0.0)):
                    fd = int(key.fd)
                    if fd == pidfd:
                        exited_at = time.monotonic()
                        sel.unregister(fd)
                        continue
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(fd)
                        open_pipes.discard(fd)
                        continue
                    room = caps[fd] - len(kept[fd])
                    if room > 0:
                        kept[fd] += chunk[:room]
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _stop_group(proc: subprocess.Popen[bytes], pgid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGTERM)
    end = time.monotonic() + KILL_GRACE
    while time.monotonic() < end and not _leader_exited(proc.pid):
        time.sleep(0.01)
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)
