"""Helpers for the watcher and arm tests: real processes, lines read with deadlines, a reaper.

Nothing here sleeps to synchronise: lines are read from pipes with a deadline and conditions
are polled with a deadline. Every watcher a test leaves behind is stopped by its pid *and*
identity at teardown, and every spawned arm is killed and reaped.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import attrs
import pytest
from firstmate.store import episodes
from firstmate.store.database import open_store
from firstmate.store.health import watcher_health
from firstmate.store.home import Home
from firstmate.store.identity import ProcessIdentity, identity_of, matches
from firstmate.testing import read_line
from firstmate.testing.procs import eventually
from firstmate.testing.sites import declare

CORE = str(Path(__file__).resolve().parents[2] / "core")
#: "Eventually" bound for every wait: generous for a loaded two-core machine.
DEADLINE = 30.0


def let_one_go(gate: Path) -> bool:
    """Let one process waiting to read a line from the FIFO *gate* go; False while none waits
    (a fake tmux that waits on it stands for a tmux call that takes as long as the test says)."""
    try:
        fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no reader yet
            return False
        raise
    try:
        os.write(fd, b"go\n")
    finally:
        os.close(fd)
    return True


@attrs.define(eq=False)
class Proc:
    """A spawned ``fm`` process whose stdout is read line by line with deadlines."""

    popen: subprocess.Popen[bytes]
    err_path: Path
    _buf: bytearray = attrs.field(factory=bytearray)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def line(self, deadline: float = DEADLINE) -> str:
        """The next stdout line; fails the test when none arrives in time (or stdout closes)."""
        return read_line(self.popen, deadline, pending=self._buf,
                         context=lambda: f"; stderr {self.stderr()!r}")

    def rest(self, deadline: float = DEADLINE) -> list[str]:
        """Every remaining stdout line, up to EOF."""
        assert self.popen.stdout is not None
        fd = self.popen.stdout.fileno()
        end = time.monotonic() + deadline
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                left = end - time.monotonic()
                assert left > 0, f"pid {self.pid} kept stdout open past {deadline}s"
                if sel.select(left):
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        break
                    self._buf += chunk
        lines = [part.decode() for part in bytes(self._buf).split(b"\n") if part]
        self._buf.clear()
        return lines

    def wait(self, deadline: float = DEADLINE) -> int:
        return self.popen.wait(timeout=deadline)

    def stderr(self) -> str:
        try:
            return self.err_path.read_text(errors="replace")
        except OSError:
            return ""


@attrs.define(eq=False)
class Rig:
    """One test's home, environment and spawned processes."""

    home: Home
    env: dict[str, str]
    tmp: Path
    procs: list[Proc] = attrs.Factory(list)
    extra: list[subprocess.Popen[bytes]] = attrs.Factory(list)

    def spawn(self, *args: str, env: Mapping[str, str] | None = None) -> Proc:
        """Start ``python -m firstmate ARGS…`` with stdout piped and stderr to a file."""
        err_path = self.tmp / f"stderr-{len(self.procs)}-{args[0] if args else 'fm'}.txt"
        with open(err_path, "wb") as err:
            popen = subprocess.Popen(
                [sys.executable, "-m", "firstmate", *args], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=err, env={**self.env, **(env or {})},
            )
        proc = Proc(popen, err_path)
        self.procs.append(proc)
        return proc

    def fm(self, *args: str, env: Mapping[str, str] | None = None,
           timeout: float = DEADLINE) -> subprocess.CompletedProcess[str]:
        """Run ``fm ARGS…`` to completion."""
        return subprocess.run(
            [sys.executable, "-m", "firstmate", *args], stdin=subprocess.DEVNULL,
            capture_output=True, text=True, env={**self.env, **(env or {})}, timeout=timeout,
            check=False,
        )

    def append(self, kind: str, key: str, payload: str) -> int:
        done = self.fm("wake", "append", kind, key, payload)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip() or 0)

    def health(self) -> object:
        return watcher_health(self.home, self.env)

    def healthy_pid(self) -> int | None:
        health = watcher_health(self.home, self.env)
        return health.pid if health.healthy else None

    def holder(self) -> ProcessIdentity | None:
        health = watcher_health(self.home, self.env)
        if not health.verified:
            return None
        return ProcessIdentity.parse(health.identity)

    def sleeper(self) -> subprocess.Popen[bytes]:
        """An unrelated live process (a stand-in for a recycled pid), returned once its exec is
        done: an identity read before that is the forking interpreter's and never matches."""
        from firstmate.testing import exec_identity

        proc = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
        self.extra.append(proc)
        exec_identity(proc)
        return proc

    def reap(self) -> None:
        holder = self.holder()
        for proc in self.procs:
            if proc.popen.poll() is None:
                with _quiet():
                    proc.popen.send_signal(signal.SIGCONT)
                    proc.popen.kill()
            with _quiet():
                proc.popen.wait(timeout=DEADLINE)
            if proc.popen.stdout is not None:
                proc.popen.stdout.close()
        for extra in self.extra:
            with _quiet():
                extra.kill()
                extra.wait(timeout=DEADLINE)
        # A watcher whose arm was killed above keeps running: stop it by pid and identity.
        for ident in filter(None, [holder, self.holder()]):
            if matches(ident):
                with _quiet():
                    os.kill(ident.pid, signal.SIGCONT)
                    os.kill(ident.pid, signal.SIGKILL)
                eventually(f"watcher {ident.pid} to die", _gone(ident))


HOLD = """
import sys
from pathlib import Path
from firstmate.store.locks import FileLock
lock = FileLock(Path(sys.argv[1]), "test-holder", Path(sys.argv[2]))
lock.acquire(None)
print("acquired", flush=True)
sys.stdin.read()
"""


BRIDGE_PLUGIN = '''
from firstmate import hookimpl
from firstmate.plugin.harness import BridgeProfile, HarnessInfo

class Plugin:
    @hookimpl
    def firstmate_harness_info(self):
        return HarnessInfo(name={name!r}, display_name="Bridge test", family="in-process",
                           rearm_owner="extension", wake_channel="fake shim")

    @hookimpl
    def firstmate_bridge_profile(self, harness):
        if harness != {name!r}:
            return None
        return BridgeProfile(harness={name!r}, delivery="followUp", retire_on_shutdown={retire},
                             idle_queue_read={idle}, readiness_timeout=20.0,
                             idle_queue_tick_env="FM_STANDIN_QUEUE_TICK_MS")

plugin = Plugin()
'''


def bridge_plugin(where: Path, name: str, *, retire: bool, idle: bool) -> Path:
    """A throwaway in-process harness plugin *name* in *where* (put it on PYTHONPATH) whose
    only hooks give ``fm bridge NAME`` its profile: it retires its arm at shutdown with
    *retire* (like omp, not like Pi) and reads the queue while idle with *idle*."""
    path = where / f"firstmate_plugin_{name}.py"
    path.write_text(BRIDGE_PLUGIN.format(name=name, retire=retire, idle=idle))
    declare(where, name, path.stem)
    return path


def hold_lock(rig: Rig, name: str) -> subprocess.Popen[bytes]:
    """A live process that is no watcher holding the home's lock *name* (with an owner record
    of its own) until it is killed; returned once it holds it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(rig.home.lock_path(name)), str(rig.home.root)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=rig.env,
    )
    rig.extra.append(proc)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"acquired\n"
    return proc


def _gone(ident: ProcessIdentity) -> Callable[[], bool]:
    return lambda: not matches(ident)


def _quiet() -> contextlib.suppress:
    return contextlib.suppress(OSError, subprocess.SubprocessError)


def make_rig(tmp_path: Path, **env: str) -> Rig:
    root = tmp_path / "home"
    base = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    base.update({
        "PYTHONPATH": os.pathsep.join([CORE, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]),
        "FM_HOME": str(root),
        "FM_SIGNAL_GRACE": "0",
        "FM_TMUX": str(tmp_path / "no-tmux"),
        "FIRSTMATE_PLUGINS": "none",
    })
    base.update(env)
    return Rig(Home(root).ensure(), base, tmp_path)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = make_rig(tmp_path)
    try:
        yield made
    finally:
        made.reap()


def episode(home: Home) -> episodes.EpisodeState:
    """The home's recovery episode, read from its store."""
    db = open_store(home)
    try:
        with db.reading() as conn:
            return episodes.read(conn)
    finally:
        db.close()


def alive(pid: int) -> bool:
    ident = identity_of(pid)
    return ident is not None


def started_pid(line: str) -> int:
    assert line.startswith("watcher: started pid="), line
    return int(line.split("pid=", 1)[1].split()[0])


def attached_pid(line: str) -> int:
    assert line.startswith("watcher: attached pid="), line
    return int(line.split("pid=", 1)[1].split()[0])
