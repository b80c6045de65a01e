"""What the in-process end-to-end tests share: the npm cache, a scratch project and home wired to
this checkout's ``fm``, status probes, and a teardown that proves nothing is left running.

Every process a test starts carries ``E2E_INPROC_TAG`` (a fresh value per test) in its
environment, and so does everything it spawns (the bridge, the arm, the watcher): teardown looks
for that tag, so a leftover is found whatever its command line looks like.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import attrs
import psutil
import pytest
from firstmate.testing.procs import eventually
from firstmate.testing.sites import declare
from mock_api import MockApi, Request, newest_user_text

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".e2e-cache"
#: How long an "eventually" condition may take before the test fails.
DEADLINE = 90.0
#: How long a harness gets to exit on its own (end of stdin, SIGTERM) before it is killed.
EXIT_WAIT = 30.0
TAG_ENV = "E2E_INPROC_TAG"
#: What ``fm install <harness>`` must write into the project for the harness to load the shim.
SHIM_FILES = {
    "pi": (".pi/extensions/firstmate/index.ts", ".pi/extensions/firstmate/bridge-client.mjs",
           ".pi/extensions/firstmate/launch.json"),
    "omp": (".omp/extensions/firstmate/index.ts", ".omp/extensions/firstmate/bridge-client.mjs",
            ".omp/extensions/firstmate/launch.json"),
    "opencode": (".opencode/plugins/firstmate.js", ".opencode/firstmate/bridge-client.mjs",
                 ".opencode/firstmate/launch.json"),
}

T = TypeVar("T")

needs_node = pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None,
    reason="node and npm are needed to install and run the real harness from npm")


def source_paths() -> list[str]:
    """Absolute source dirs of this checkout for what is not installed: under tox the installed
    packages (and the shim files they ship) are used; in a bare checkout, the sources, with a
    site directory that declares the plugins' entry points (fm finds a plugin by nothing else)."""
    import importlib.util

    wanted = {"firstmate": REPO / "core",
              **{f"firstmate_plugin_{name}": REPO / "plugins" / name / "src"
                 for name in ("pi", "omp", "opencode")}}
    paths, undeclared = [], []
    for module, path in wanted.items():
        spec = importlib.util.find_spec(module)
        origin = Path(spec.origin).resolve() if spec and spec.origin else None
        if origin is None or origin.is_relative_to(path.resolve()):
            paths.append(str(path))
        if origin is None and module != "firstmate":
            undeclared.append(module)
    if undeclared:
        paths.append(str(entry_point_site(tuple(undeclared))))
    return paths


@functools.cache
def entry_point_site(modules: tuple[str, ...]) -> Path:
    """A site directory holding a dist-info with the entry point of each plugin in *modules*."""
    import tempfile

    site = Path(tempfile.mkdtemp(prefix="fm-e2e-site-"))
    for module in modules:
        declare(site, module.removeprefix("firstmate_plugin_"), f"{module}.hooks",
                dist=module.replace("_", "-"), version="0.dev0")
    return site


def npm_install(name: str, version: str, packages: list[str], binary: str) -> Path:
    """``.e2e-cache/<name>-<version>/node_modules/.bin/<binary>``, installed on first use."""
    root = CACHE / f"{name}-{version}"
    path = root / "node_modules" / ".bin" / binary
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", *packages], cwd=root,
                              capture_output=True, text=True, timeout=600,
                              stdin=subprocess.DEVNULL, check=False)
        assert done.returncode == 0 and path.exists(), (
            f"npm install {' '.join(packages)} failed in {root}:\n{done.stderr[-3000:]}")
    return path


@attrs.define(eq=False)
class Rig:
    """A scratch user HOME, project and Firstmate home, with ``fm`` from this checkout."""

    tmp: Path
    harness: str
    tag: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    procs: list[subprocess.Popen[bytes]] = attrs.Factory(list)
    stoppers: list[Callable[[], None]] = attrs.Factory(list)
    rpcs: list[Rpc] = attrs.Factory(list)
    env: dict[str, str] = attrs.Factory(dict)
    install_output: str = ""

    @property
    def user(self) -> Path:
        return self.tmp / "user"

    @property
    def project(self) -> Path:
        return self.tmp / "proj"

    @property
    def fm_home(self) -> Path:
        return self.tmp / "fmhome"

    @property
    def bindir(self) -> Path:
        return self.tmp / "bin"

    @property
    def calls_log(self) -> Path:
        return self.bindir / "calls.log"

    def setup(self, extra_path: list[Path] | None = None,
              extra_env: dict[str, str] | None = None, logged_fm: bool = False,
              install: bool = True) -> None:
        """Write the scratch dirs and run the real ``fm install`` and ``fm crew add``. By default
        the shim launches the bridge the way a user's install does (this interpreter, pinned
        into ``launch.json``); *logged_fm* installs with ``--fm-command`` naming the logging
        ``fm`` wrapper instead, so a test can prove the bridge was never started. Without
        *install* nothing is written into the project: the harness loads the shim from a
        package the test installs, and the shim finds the logging ``fm`` on PATH."""
        for path in (self.user, self.project, self.bindir):
            path.mkdir(parents=True, exist_ok=True)
        fm = self.bindir / "fm"
        # Every call is logged, so a test can tell whether the shim ever started `fm bridge`.
        fm.write_text(f'#!/bin/sh\necho "$$ $*" >> "{self.calls_log}"\n'
                      f'exec "{sys.executable}" -m firstmate "$@"\n')
        fm.chmod(0o755)
        paths = [*source_paths(), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("FM_", "FIRSTMATE_", "PI_", "OMP_", "OPENCODE_"))}
        search = [str(self.bindir), *(str(p) for p in extra_path or []), env.get("PATH", "")]
        env.update(HOME=str(self.user), PATH=os.pathsep.join(search),
                   PYTHONPATH=os.pathsep.join(paths), FM_HOME=str(self.fm_home),
                   FM_SIGNAL_GRACE="0", FM_TMUX=str(self.tmp / "no-tmux"), NO_COLOR="1",
                   # OpenCode takes its project directory from PWD, not from the real cwd.
                   PWD=str(self.project),
                   **{TAG_ENV: self.tag}, **(extra_env or {}))
        # The mock is on loopback: keep any proxy for the registry, but never for 127.0.0.1.
        for name in ("NO_PROXY", "no_proxy"):
            env[name] = ",".join(filter(None, [env.get(name, ""), "127.0.0.1", "localhost"]))
        self.env = env
        if install:
            command = ["--fm-command", str(fm)] if logged_fm else []
            installed = self.fm("install", self.harness, "--project", str(self.project), *command)
            assert installed.returncode == 0, f"fm install {self.harness}: {installed.stderr}"
            self.install_output = installed.stdout + installed.stderr
            missing = [name for name in SHIM_FILES[self.harness]
                       if not (self.project / name).is_file()]
            assert not missing, (f"fm install {self.harness} did not write {missing}; it said: "
                                 f"{self.install_output.strip()}")
        # A crew makes the home need supervision; its pane does not exist, FM_TMUX is absent.
        added = self.fm("crew", "add", "builder", "--pane", "%99999")
        assert added.returncode == 0, f"fm crew add: {added.stderr}"

    def fm(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "firstmate", *args], env=self.env,
                              cwd=self.project, capture_output=True, text=True, timeout=60,
                              check=False)

    def status(self) -> dict[str, Any]:
        done = self.fm("status", "--json")
        if done.returncode != 0:
            return {}
        value: dict[str, Any] = json.loads(done.stdout)
        return value

    def watcher(self) -> int | None:
        """The pid of the healthy watcher holding the watcher lock, else None."""
        watcher = self.status().get("watcher") or {}
        return int(watcher["pid"]) if watcher.get("healthy") and watcher.get("pid") else None

    def successor(self, *before: int) -> int | None:
        pid = self.watcher()
        return pid if pid is not None and pid not in before else None

    def health_now(self) -> tuple[bool, int | None]:
        """The watcher's health read in this process, fast enough to run inside the mock's
        request handler: (healthy, pid of the lock holder)."""
        from firstmate.store.health import watcher_health
        from firstmate.store.home import Home

        health = watcher_health(Home(self.fm_home), self.env)
        return health.healthy, health.pid

    def session_lock_pid(self) -> int | None:
        lock = self.status().get("session_lock") or {}
        return int(lock["pid"]) if lock.get("state") == "held" and lock.get("pid") else None

    def wake(self, text: str) -> None:
        done = self.fm("wake", "append", "signal", "builder", text)
        assert done.returncode == 0, f"fm wake append: {done.stderr}"

    def diag(self) -> str:
        """What a failure message needs: the harness's notices and stderr, the bridge state,
        status, and the tail of the watcher cycle log."""
        harness = "\n".join(rpc.diag() for rpc in self.rpcs)
        cycles = tail(self.fm_home / "state" / "logs" / "cycle-exits.tsv", 2000)
        return (f"{harness}\nbridge state: {self.bridge_state()}\n"
                f"status: {json.dumps(self.status())}\ncycle exits:\n{cycles}")

    def bridge_state(self) -> dict[str, Any]:
        """``state/bridge-<harness>.json``: the bridge's active generation and phase."""
        try:
            value: dict[str, Any] = json.loads(
                (self.fm_home / "state" / f"bridge-{self.harness}.json").read_text())
        except (OSError, ValueError):
            return {}
        return value

    def bridges(self) -> list[int]:
        """Live ``fm bridge <harness>`` processes started for this rig: ``python -m firstmate
        bridge …`` or, as ``fm install`` now writes it, the ``fm`` script by absolute path."""
        found = []
        for proc in self.tagged():
            with contextlib.suppress(psutil.Error):
                words = proc.cmdline()
                ours = "firstmate" in words or any(os.path.basename(w) == "fm" for w in words)
                if ours and "bridge" in words:
                    found.append(proc.pid)
        return found

    def bridge_calls(self) -> list[str]:
        if not self.calls_log.exists():
            return []
        return [line for line in self.calls_log.read_text().splitlines()
                if line.split(" ", 2)[1:2] == ["bridge"]]

    def spawn(self, argv: list[str], log: Path, stdin: int = subprocess.DEVNULL,
              errlog: Path | None = None) -> subprocess.Popen[bytes]:
        """Start *argv* in the project, in its own process group, stdout (and stderr unless
        *errlog* is given) to *log*."""
        with contextlib.ExitStack() as files:
            out = files.enter_context(open(log, "wb"))
            err = files.enter_context(open(errlog, "wb")) if errlog else subprocess.STDOUT
            proc = subprocess.Popen(argv, cwd=self.project, env=self.env, stdin=stdin,
                                    stdout=out, stderr=err, start_new_session=True)
        self.procs.append(proc)
        return proc

    def rpc(self, argv: list[str], name: str) -> Rpc:
        """Start a harness in JSONL RPC mode (Pi, omp); stdin stays open until :meth:`Rpc.close`
        because both exit on end of input."""
        out, err = self.tmp / f"{name}.jsonl", self.tmp / f"{name}.stderr"
        proc = self.spawn(argv, out, stdin=subprocess.PIPE, errlog=err)
        client = Rpc(proc, out, err)
        self.stoppers.append(client.close)
        self.rpcs.append(client)
        return client

    def tagged(self) -> list[psutil.Process]:
        """Every live process carrying this rig's tag (zombies excluded)."""
        found = []
        for proc in psutil.process_iter(["pid", "status"]):
            if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            with contextlib.suppress(psutil.Error):
                if proc.environ().get(TAG_ENV) == self.tag:
                    found.append(proc)
        return found

    def describe(self, procs: list[psutil.Process]) -> str:
        lines = []
        for one in procs:
            with contextlib.suppress(psutil.Error):
                lines.append(f"{one.pid} {' '.join(one.cmdline())[:200]}")
        return "; ".join(lines) or "none"

    def teardown(self) -> tuple[list[str], list[str]]:
        """Stop the harness, then ``fm arm --stop``, then kill whatever is still tagged.

        Returns (what outlived the harness, what outlived ``fm arm --stop`` too). The bridge
        must stop every arm it owns once the harness's pipe closes (docs/bridge.md), so the
        first list is expected to be empty as well."""
        for stop in self.stoppers:
            with contextlib.suppress(Exception):
                stop()
        for proc in self.procs:
            stop_process(proc)
        outlived_harness = self._settle()
        self.fm("arm", "--stop")
        outlived_stop = self._settle()
        for left in self.tagged():
            with contextlib.suppress(psutil.Error):
                left.kill()
        return outlived_harness, outlived_stop

    def _settle(self) -> list[str]:
        """Wait (bounded) for every tagged process to end; describe the ones that did not."""
        end = time.monotonic() + EXIT_WAIT
        while (left := [p for p in self.tagged() if _alive(p)]) and time.monotonic() < end:
            time.sleep(0.2)
        return [self.describe([p]) for p in left if _alive(p)]


@attrs.define(eq=False)
class Rpc:
    """One harness process in JSONL RPC mode: commands on stdin, events read back from the
    stdout log."""

    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def send(self, command: dict[str, object]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")
        self.proc.stdin.flush()

    def events(self) -> list[dict[str, Any]]:
        found = []
        for line in self.out.read_bytes().split(b"\n"):
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict):
                    found.append(value)
        return found

    def response(self, ident: str) -> dict[str, Any] | None:
        return next((e for e in self.events()
                     if e.get("type") == "response" and e.get("id") == ident), None)

    def count(self, kind: str) -> int:
        return sum(e.get("type") == kind for e in self.events())

    def diag(self) -> str:
        notes = [e for e in self.events() if e.get("type") == "extension_ui_request"
                 and e.get("method") in ("notify", "setStatus")]
        return (f"rc={self.proc.poll()} notices={json.dumps(notes)[-1500:]}\n"
                f"stderr: {tail(self.err, 2000)}")

    def close(self) -> None:
        """End of input: the harness quits, which ends its shim's bridge."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=EXIT_WAIT)


def rpc_first_turn(r: Rig, harness: Rpc, mock: MockApi) -> int:
    """Run one prompt over RPC (Pi, omp); the pid of the watcher the bridge armed after it."""
    harness.send({"id": "p1", "type": "prompt", "message": "say hi"})
    eventually("the first turn at the mock", lambda: mock.seen("say hi"), diag=r.diag, deadline=DEADLINE)
    eventually("the first turn to end", lambda: harness.count("agent_end"), diag=r.diag, deadline=DEADLINE)
    first = eventually("a healthy watcher armed by the bridge", r.watcher, diag=r.diag, deadline=DEADLINE)
    assert r.session_lock_pid() == harness.proc.pid, (
        f"session lock: {r.status().get('session_lock')}")
    assert r.bridges(), f"no fm bridge {r.harness} process is running"
    return first


def assert_successor_held(request: Request, before: int, harness: str) -> None:
    """When *harness* sent *request* (a delivered wake), a healthy watcher other than *before*
    (the one that closed on the wake) held the watcher lock: successor first, then delivery."""
    probe = request.probe
    assert isinstance(probe, tuple) and len(probe) == 2, f"no watcher snapshot: {probe!r}"
    healthy, holder = probe
    assert healthy and holder not in (None, before), (
        f"when {harness} sent the wake, the watcher was healthy={healthy} pid={holder} "
        f"(watcher before the wake {before}): the successor must hold the lock before delivery")


def wake_reaches_model(r: Rig, harness: Rpc, mock: MockApi, first: int, label: str) -> None:
    """Append a wake from outside and check it reaches the model with a successor watcher
    already holding the lock when the harness sent it, and that supervision goes on."""
    text = f"WAKE-{label}-{uuid.uuid4().hex[:8]}"
    r.wake(f"signal: builder done: {text}")
    request = eventually(f"the mock to receive {text}", lambda: mock.first(text), diag=r.diag, deadline=DEADLINE)
    assert_successor_held(request, first, label)
    assert eventually("a healthy successor after the wake turn", lambda: r.successor(first), deadline=DEADLINE)
    assert harness.proc.poll() is None, harness.diag()


def replace_while_close_pending(r: Rig, harness: Rpc, mock: MockApi, first: int,
                                label: str) -> dict[str, Any]:
    """Queue a wake, replace the session at once (RPC ``new_session``, the TUI's ``/new``) so
    the watcher's close and its delivery overlap the handoff, and check the wake reaches the
    model exactly once. Returns the new_session response."""
    text = f"WAKE-{label}-NEW-{uuid.uuid4().hex[:8]}"
    r.wake(f"signal: builder done: {text}")
    harness.send({"id": "n1", "type": "new_session"})
    replaced = eventually("the answer to new_session",
                          lambda: harness.response("n1"),
                          deadline=DEADLINE, diag=r.diag)
    assert replaced.get("success") and not (replaced.get("data") or {}).get("cancelled"), replaced
    request = eventually(f"the mock to receive {text}", lambda: mock.first(text), diag=r.diag, deadline=DEADLINE)
    assert_successor_held(request, first, f"{label} (replaced session)")
    # Barrier: deliveries go out in close order, so once a later wake has reached the model any
    # duplicate of the first would already have been sent.
    eventually("a healthy successor after the replacement", lambda: r.successor(first), deadline=DEADLINE)
    later = f"WAKE-{label}-LATER-{uuid.uuid4().hex[:8]}"
    r.wake(f"signal: builder done: {later}")
    eventually(f"the mock to receive {later}", lambda: mock.first(later), diag=r.diag, deadline=DEADLINE)
    turns = [newest_user_text(body) for body in mock.bodies()]
    carrying = [turn for turn in turns if text in turn]
    assert len(carrying) == 1, f"{text} reached the model {len(carrying)} times: {turns}"
    # Nor again as a recovery: the same rows never come back as check: rearm-resurface.
    resurfaced = [turn for turn in turns if "rearm-resurface" in turn]
    assert not resurfaced, f"a second wake for the same rows: {resurfaced}"
    for body in mock.bodies():
        users = [m for m in json.loads(body).get("messages", []) if m.get("role") == "user"]
        assert sum(text in json.dumps(m) for m in users) <= 1, body[-2000:]
    assert harness.proc.poll() is None, harness.diag()
    return replaced


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process itself (its bridge must notice on its own, as when a user quits),
    and SIGKILL its whole group only when it does not exit in time."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(OSError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=EXIT_WAIT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=EXIT_WAIT)


@contextlib.contextmanager
def rig(tmp: Path, harness: str) -> Iterator[Rig]:
    made = Rig(tmp, harness)
    try:
        yield made
    finally:
        outlived_harness, outlived_stop = made.teardown()
    assert not outlived_stop, f"processes outlived the harness and fm arm --stop: {outlived_stop}"
    assert not outlived_harness, (
        f"processes outlived the harness (its bridge must stop its arms): {outlived_harness}")


def tail(path: Path, size: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return f"({path} not readable)"
