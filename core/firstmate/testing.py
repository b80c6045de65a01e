"""Pytest helpers for Firstmate and its plugins (an opt-in pytest plugin), and the plugin contract.

Enable with ``pytest_plugins = ["firstmate.testing"]`` in a conftest. Fixtures:

``fm_home`` / ``fm_env``
    A fresh prepared home (``FM_HOME`` points at it) and the environment a child ``fm`` runs with.
``spawned_arm``
    ``fm arm`` started in that home as a real process; its first status line is read, the reason
    line can be awaited with a deadline, and teardown stops the watcher and kills leftovers.
``fake_harness``
    A callable stand-in for a harness's wake channel that records every delivery.

:class:`HarnessContract` is the conformance suite every harness plugin passes (see
``tests/contract/test_harness_contract.py``); subclass it with a ``harness`` fixture.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from firstmate.home import Home
from firstmate.identity import ProcessIdentity

#: Generous "eventually" bound for a loaded two-core machine; never an upper bound on speed.
DEADLINE = 30.0


def fm_command(*args: str) -> list[str]:
    """The argv that runs ``fm`` with this interpreter (works installed or from a checkout)."""
    return [sys.executable, "-m", "firstmate", *args]


@pytest.fixture
def fm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    """A fresh, prepared home; ``FM_HOME`` points at it for this test and its children."""
    root = tmp_path / "home"
    monkeypatch.setenv("FM_HOME", str(root))
    # The home's secrets go beside it, never into the user's own keys directory.
    monkeypatch.setenv("FIRSTMATE_KEYS_DIR", str(tmp_path / "keys"))
    for name in list(os.environ):
        if name.startswith("FM_") and name != "FM_HOME":
            monkeypatch.delenv(name, raising=False)
    yield Home(root).ensure()


@pytest.fixture
def fm_env(fm_home: Home) -> Mapping[str, str]:
    """The environment a child ``fm`` process should run with."""
    return {**os.environ, "FM_HOME": str(fm_home.root)}


# --- reading a child's stdout ----------------------------------------------------------------


def exec_identity(popen: subprocess.Popen[Any], deadline: float = DEADLINE) -> ProcessIdentity:
    """The identity of a child spawned with an argv list, once its exec is done. Right after a
    spawn ``/proc`` may still show the forking interpreter's command line, and an identity read
    then never matches the process again (a window that grows on a loaded machine)."""
    from firstmate.identity import cmd_hash, identity_of

    assert isinstance(popen.args, list | tuple), "spawn with an argv list"
    want = cmd_hash([os.fsdecode(arg) for arg in popen.args])
    end = time.monotonic() + deadline
    while True:
        found = identity_of(popen.pid)
        if found is not None and found.cmd_hash == want:
            return found
        if popen.poll() is not None or time.monotonic() >= end:
            pytest.fail(f"pid {popen.pid} never showed its own command line (exit {popen.poll()})")
        time.sleep(0.01)  # a poll with a deadline: /proc offers no event for an exec


def read_line(popen: subprocess.Popen[bytes], deadline: float = DEADLINE, *,
              pending: bytearray | None = None,
              context: Callable[[], str] | None = None) -> str:
    """The next line of *popen*'s stdout (without its newline), waited for at most *deadline*
    seconds; fails the test when none arrives or stdout closes first.

    With *pending* (the caller's buffer, kept between calls) it reads in chunks and leaves what
    follows the line there; without, it reads a byte at a time so nothing past the line is taken
    from the pipe. *context*, called on failure, adds to the message (say, the child's stderr).
    """
    assert popen.stdout is not None
    fd = popen.stdout.fileno()
    buf = bytearray() if pending is None else pending
    size = 1 if pending is None else 65536
    end = time.monotonic() + deadline
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = end - time.monotonic()
            if left <= 0:
                pytest.fail(f"no line from pid {popen.pid} within {deadline}s; got "
                            f"{bytes(buf)!r}{context() if context else ''}")
            if sel.select(left):
                chunk = os.read(fd, size)
                if not chunk:
                    pytest.fail(f"pid {popen.pid} closed stdout (rc {popen.poll()}) after "
                                f"{bytes(buf)!r}{context() if context else ''}")
                buf += chunk
    at = buf.index(b"\n")
    line = bytes(buf[:at])
    del buf[:at + 1]
    return line.decode(errors="replace")


# --- a real arm ------------------------------------------------------------------------------


def _quietly() -> contextlib.suppress:
    return contextlib.suppress(OSError, subprocess.SubprocessError)


@attrs.define(eq=False)
class SpawnedArm:
    """An ``fm arm`` process: :attr:`status` is its first status line (``watcher: started …``,
    ``watcher: attached …`` or ``watcher: FAILED - …``)."""

    popen: subprocess.Popen[bytes]
    env: Mapping[str, str]
    stderr_path: Path
    status: str = ""
    _buf: bytearray = attrs.field(factory=bytearray)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def line(self, deadline: float = DEADLINE) -> str:
        """The next stdout line; fails the test when none arrives within *deadline* seconds."""
        return read_line(self.popen, deadline, pending=self._buf,
                         context=lambda: f"; fm arm stderr {self.stderr()!r}")

    def wait_reason(self, deadline: float = DEADLINE) -> str:
        """The cycle's reason line (the next stdout line), awaited for at most *deadline*."""
        return self.line(deadline)

    def wait(self, deadline: float = DEADLINE) -> int:
        return self.popen.wait(timeout=deadline)

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """``fm arm --stop`` (stops the identity-verified watcher), then kill what is left."""
        with _quietly():
            subprocess.run(fm_command("arm", "--stop"), env=dict(self.env), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=DEADLINE, check=False)
        if self.popen.poll() is None:
            with _quietly():
                self.popen.wait(timeout=5)
        # The arm runs in its own process group: anything it started and left behind goes too.
        with _quietly():
            os.killpg(self.popen.pid, signal.SIGKILL)
        with _quietly():
            self.popen.wait(timeout=DEADLINE)
        if self.popen.stdout is not None:
            self.popen.stdout.close()


def arm_env(home: Home, tmp_path: Path, **extra: str) -> dict[str, str]:
    """An environment for arms and watchers in *home*: no tmux, no plugins, no coalescing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(FM_HOME=str(home.root), FM_SIGNAL_GRACE="0", FM_TMUX=str(tmp_path / "no-tmux"),
               FIRSTMATE_PLUGINS="none")
    env.update(extra)
    return env


def spawn_arm(home: Home, tmp_path: Path, *args: str, env: Mapping[str, str] | None = None,
              deadline: float = DEADLINE) -> SpawnedArm:
    """Start ``fm arm ARGS…`` and read its first status line."""
    run_env = dict(env) if env is not None else arm_env(home, tmp_path)
    err = tmp_path / f"arm-stderr-{time.monotonic_ns()}.txt"
    with open(err, "wb") as err_file:
        popen = subprocess.Popen(fm_command("arm", *args), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=err_file, env=run_env,
                                 start_new_session=True)
    arm = SpawnedArm(popen, run_env, err)
    try:
        arm.status = arm.line(deadline)
    except BaseException:
        arm.stop()
        raise
    return arm


@pytest.fixture
def spawned_arm(fm_home: Home, tmp_path: Path) -> Iterator[SpawnedArm]:
    """``fm arm`` running in ``fm_home``; ``.status`` is its first line, ``.wait_reason()`` the
    cycle's reason. Teardown runs ``fm arm --stop`` and kills anything left over."""
    arm = spawn_arm(fm_home, tmp_path)
    try:
        yield arm
    finally:
        arm.stop()


# --- a fake harness endpoint -----------------------------------------------------------------


@attrs.frozen
class Delivery:
    """One wake a plugin delivered into a :class:`FakeHarness`."""

    text: str
    meta: Mapping[str, Any]
    at: float


@attrs.define(eq=False)
class FakeHarness:
    """A harness's wake channel for tests: call it with the wake text (and any keywords the
    harness API would take); it records the delivery and returns :attr:`accept`."""

    accept: bool = True
    deliveries: list[Delivery] = attrs.Factory(list)
    _cond: threading.Condition = attrs.Factory(threading.Condition)

    def __call__(self, text: str, **meta: Any) -> bool:
        with self._cond:
            self.deliveries.append(Delivery(text, dict(meta), time.time()))
            self._cond.notify_all()
        return self.accept

    @property
    def texts(self) -> list[str]:
        with self._cond:
            return [d.text for d in self.deliveries]

    def wait_for(self, count: int = 1, deadline: float = DEADLINE) -> list[Delivery]:
        """Block until at least *count* deliveries arrived (from any thread); fail after *deadline*."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.deliveries) >= count, timeout=deadline):
                pytest.fail(f"{len(self.deliveries)} of {count} deliveries within {deadline}s")
            return list(self.deliveries)


@pytest.fixture
def fake_harness() -> FakeHarness:
    """A fresh :class:`FakeHarness` that accepts every delivery."""
    return FakeHarness()


# --- sample payloads -------------------------------------------------------------------------

def sample_of(info: Any, event: str) -> tuple[dict[str, Any], dict[str, str]] | None:
    """*info*'s declared sample hook call for *event* (HarnessInfo.sample_payload/sample_env),
    the event name filled in; None when the harness declares none."""
    if not info.sample_payload:
        return None
    pascal = "".join(part.capitalize() for part in event.split("-"))  # Stop, StopFailure
    names = {"{Event}": pascal, "{event}": pascal[:1].lower() + pascal[1:]}

    def fill(value: Any) -> Any:
        return names.get(value, value) if isinstance(value, str) else value

    payload = {key: fill(value) for key, value in info.sample_payload.items()}
    env = {key: str(fill(value)) for key, value in info.sample_env.items()}
    return payload, env


def sample_call(harness: str, event: str) -> tuple[dict[str, Any], dict[str, str]] | None:
    """A realistic ``(payload, env)`` for *harness* calling its *event* hook, as its installed
    plugin declares it; None when it declares none or is not installed here."""
    from firstmate.plugins import load

    info = load({}).harness(harness)
    return sample_of(info, event) if info is not None else None


def payload_harnesses() -> list[str]:
    """The installed harnesses that declare a sample hook payload."""
    from firstmate.plugins import load

    return [info.name for info in load({}).harnesses() if info.sample_payload]


#: Hostile stdin for ``fm hook``: empty, truncated, not UTF-8, not an object, too large, and
#: an object of the wrong shape (common keys with the wrong type; :func:`garbage_payload` adds
#: every key of the harness's own sample payload).
GARBAGE_PAYLOADS: dict[str, bytes] = {
    "empty": b"",
    "truncated": b"{",
    "not-utf8": b"\xff\xfe",
    "array": b"[]",
    "oversized": b'{"pad": "' + b"x" * (2 << 20) + b'"}',
    "wrong-shape": json.dumps({
        "hook_event_name": 42, "hookEventName": {}, "turn_id": None,
        "session_id": ["x"], "stop_hook_active": "yes", "loop_count": -1, "status": {"a": 1},
    }).encode(),
}

def garbage_payload(name: str, sample_payload: Mapping[str, Any]) -> bytes:
    """The garbage stdin *name* for a harness whose sample payload is *sample_payload*: the
    wrong-shape object also carries each of the harness's own keys with a wrong type."""
    if name != "wrong-shape":
        return GARBAGE_PAYLOADS[name]
    shape = json.loads(GARBAGE_PAYLOADS[name])
    for key, value in sample_payload.items():
        shape.setdefault(key, [] if not isinstance(value, list) else {"a": 1})
    return json.dumps(shape).encode()


#: ``fm hook`` exit statuses a garbage payload may produce: 0 (nothing to do) or 2 (a harness's
#: own wake/block code). 1 would be an internal error, i.e. a bug.
HOOK_GARBAGE_EXITS = (0, 2)

def user_file_bytes(relpath: str, samples: Mapping[str, Any] | None = None) -> bytes:
    """What a user might already have at *relpath* (a project-relative config file): the
    plugin's own sample (``HarnessInfo.sample_user_files``, passed as *samples*), else a
    generic JSON or text file."""
    sample = (samples or {}).get(relpath)
    if isinstance(sample, str):
        return sample.encode()
    if sample is not None:
        return (json.dumps(sample, indent=4) + "\n").encode()
    if relpath.endswith(".json"):
        return b'{\n    "x-user-setting": {"keep": [1, "two", null]}\n}\n'
    return b"# Notes\n\nThe user's own notes.\n"


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under *root*, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def json_contains(outer: Any, inner: Any) -> bool:
    """Whether *outer* still holds everything in *inner* (dict keys; list items in order)."""
    if isinstance(inner, dict):
        return isinstance(outer, dict) and all(
            key in outer and json_contains(outer[key], value) for key, value in inner.items())
    if isinstance(inner, list):
        if not isinstance(outer, list):
            return False
        it = iter(outer)
        return all(any(json_contains(candidate, item) for candidate in it) for item in inner)
    return bool(outer == inner)


def contract_plugin_names(env: Mapping[str, str] | None = None) -> list[str]:
    """Plugins the contract suite runs against: ``FIRSTMATE_CONTRACT_PLUGINS`` or every one installed."""
    env = os.environ if env is None else env
    named = [n.strip() for n in env.get("FIRSTMATE_CONTRACT_PLUGINS", "").split(",") if n.strip()]
    if named:
        return named
    from importlib.metadata import entry_points

    from firstmate.plugins import ENTRY_POINT_GROUP

    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


# --- the contract ----------------------------------------------------------------------------


class HarnessContract:
    """Checks every harness plugin must pass. Subclass with a ``harness`` fixture (a harness
    name); each check is a plain pytest test method. Override :meth:`user_config_files` to
    give the install checks your harness's realistic pre-existing files."""

    # --- fixtures and helpers ----------------------------------------------------------------

    @pytest.fixture
    def host(self, harness: str) -> Any:
        from firstmate.plugins import load_harness

        return load_harness(harness, fresh=True)

    @pytest.fixture
    def plugin(self, harness: str, host: Any) -> object:
        registered = host.pm.get_plugin(harness)
        assert registered is not None, f"{harness} was not registered"
        return registered

    @pytest.fixture
    def info(self, harness: str, host: Any) -> Any:
        found = host.harness(harness)
        assert found is not None, f"{harness} declares no HarnessInfo"
        return found

    @pytest.fixture
    def project(self, tmp_path: Path) -> Path:
        path = tmp_path / "project"
        path.mkdir()
        return path

    def user_config_files(self, info: Any) -> dict[str, bytes]:
        """Files the user already has, for each config file the harness installs."""
        return {rel: user_file_bytes(rel, info.sample_user_files) for rel in info.config_files}

    @staticmethod
    def events(info: Any) -> tuple[str, ...]:
        # In-process harnesses have no hook events; `fm hook <them> stop` must still be harmless.
        return tuple(info.hook_events) or ("stop",)

    @staticmethod
    def options(harness: str, project: Path, **changes: Any) -> Any:
        from firstmate.harness import InstallOptions

        return InstallOptions(harness=harness, project=project, **changes)

    # --- identity ----------------------------------------------------------------------------

    def test_declares_harness_info_under_its_entry_point_name(self, harness: str, plugin: object) -> None:
        from firstmate.harness import HarnessInfo

        info = plugin.firstmate_harness_info()  # type: ignore[attr-defined]
        assert isinstance(info, HarnessInfo)
        assert info.name == harness
        assert info.display_name

    def test_found_by_entry_point_scan(self, harness: str) -> None:
        from firstmate.plugins import load

        host = load()
        assert harness in {info.name for info in host.harnesses()}
        assert not [f for f in host.failures if f.name == harness]

    def test_its_processes_are_found_by_the_session_lock(self, harness: str, info: Any) -> None:
        """The session lock finds the harness above an ``fm`` process only by what the plugin
        declares (core knows no harness): every harness names its process."""
        from firstmate.harnessprocs import HarnessTable, harness_of
        from firstmate.identity import ProcInfo

        assert info.process_names, (
            f"{harness} declares no process_names: the session lock could never find its process")
        table = HarnessTable.of([info])
        for name in info.process_names:
            assert harness_of(ProcInfo(pid=2, ppid=1, name=name, cmdline=(name,)),
                              table=table) == harness
        for marker in info.package_markers:
            script = "/n/node_modules/" + "/".join(marker) + "/cli.js"
            assert harness_of(ProcInfo(pid=2, ppid=1, name="node", cmdline=("node", script)),
                              table=table) == harness
        # And through the installed plugins, as the session lock reads them.
        assert harness_of(ProcInfo(pid=2, ppid=1, name=info.process_names[0],
                                   cmdline=(info.process_names[0],))) == harness

    def test_plugin_is_not_comparable_by_value(self, plugin: object) -> None:
        # Plugins are services (attrs eq=False): two instances are never "equal" registrations.
        assert plugin != type(plugin)()

    # --- hook signatures ---------------------------------------------------------------------

    def test_hookimpls_match_known_specs(self, host: Any, plugin: object) -> None:
        # check_pending raises for a hookimpl whose name has no spec (a misspelt hook).
        host.pm.check_pending()
        callers = host.pm.get_hookcallers(plugin)
        assert callers, "the plugin implements no hook"
        for caller in callers:
            assert caller.name.startswith("firstmate_"), caller.name
            assert caller.spec is not None, f"{caller.name} has no spec"
            for impl in caller.get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                extra = set(impl.argnames) - set(caller.spec.argnames)
                assert not extra, f"{caller.name} takes {sorted(extra)}, not in the spec"
                # pluggy never passes an argument that has a default value: a silent trap.
                assert not impl.kwargnames, f"{caller.name} gives defaults to {impl.kwargnames}"

    # --- fm hook -----------------------------------------------------------------------------

    def test_hook_answers_none_for_another_harness_name(self, harness: str, host: Any,
                                                        info: Any, fm_home: Home) -> None:
        from firstmate.plugins import load

        others = [name for name in (*(i.name for i in load({}).harnesses()), "not-a-harness",
                                    "other-harness") if name != harness]
        for event in self.events(info):
            call = sample_call(harness, event)
            payload, env = call if call is not None else ({}, {})
            for other in others:
                outcome = host.hook(harness=other, event=event, payload=payload, home=fm_home,
                                    env=env)
                assert outcome is None, f"{harness} answered fm hook {other} {event}"

    def test_hook_answers_none_for_a_foreign_payload(self, harness: str, host: Any, info: Any,
                                                     fm_home: Home) -> None:
        for event in self.events(info):
            for other in payload_harnesses():
                call = sample_call(other, event)
                if other == harness or call is None:
                    continue
                payload, env = call
                outcome = host.hook(harness=harness, event=event, payload=payload, home=fm_home,
                                    env=env)
                assert outcome is None, (
                    f"fm hook {harness} {event} acted on a {other} payload: {outcome!r}")

    def test_hook_answers_its_own_harness(self, harness: str, host: Any, info: Any,
                                          fm_home: Home) -> None:
        from firstmate.harness import HookOutcome

        calls = [(event, sample_of(info, event)) for event in info.hook_events]
        if not info.hook_events:
            pytest.skip(f"{harness} has no command hooks")
        assert info.sample_payload, (
            f"{harness} declares hook events but no sample_payload: the contract cannot drive "
            "its hooks (declare a realistic hook input in its HarnessInfo)")
        for event, call in calls:
            assert call is not None
            payload, env = call
            outcome = host.hook(harness=harness, event=event, payload=payload, home=fm_home,
                                env=env)
            assert isinstance(outcome, HookOutcome), f"fm hook {harness} {event} gave {outcome!r}"

    @pytest.mark.parametrize("garbage", sorted(GARBAGE_PAYLOADS))
    def test_hook_survives_garbage_on_stdin(self, harness: str, info: Any, fm_env: Mapping[str, str],
                                            garbage: str) -> None:
        for event in self.events(info):
            stdin = garbage_payload(garbage, info.sample_payload)
            done = subprocess.run(fm_command("hook", harness, event), input=stdin,
                                  capture_output=True, env=dict(fm_env), timeout=DEADLINE * 2,
                                  check=False)
            stderr = done.stderr.decode(errors="replace")
            assert "Traceback" not in stderr, stderr
            assert done.returncode in HOOK_GARBAGE_EXITS, (
                f"fm hook {harness} {event} with {garbage} stdin exited {done.returncode}: {stderr}")

    # --- fm install / uninstall --------------------------------------------------------------

    def test_install_twice_changes_no_byte(self, harness: str, host: Any, fm_home: Home,
                                           project: Path) -> None:
        from firstmate.harness import InstallResult

        first = host.install(fm_home, self.options(harness, project))
        assert isinstance(first, InstallResult) and first.harness == harness
        assert first.changed or first.notes, "an install that writes nothing must say why"
        after_first = snapshot(project)
        second = host.install(fm_home, self.options(harness, project))
        assert snapshot(project) == after_first
        assert not second.changed, f"the second install changed {second.changes}"

    def test_dry_run_writes_nothing_and_predicts_the_install(self, harness: str, host: Any,
                                                             fm_home: Home, project: Path) -> None:
        planned = host.install(fm_home, self.options(harness, project, dry_run=True))
        assert snapshot(project) == {}
        assert planned.dry_run
        done = host.install(fm_home, self.options(harness, project))
        assert [(c.path, c.action) for c in planned.changes] == \
            [(c.path, c.action) for c in done.changes]

    def test_install_then_uninstall_leaves_an_empty_project_empty(
            self, harness: str, host: Any, fm_home: Home, project: Path) -> None:
        host.install(fm_home, self.options(harness, project))
        host.uninstall(fm_home, self.options(harness, project))
        assert snapshot(project) == {}
        assert not any(project.iterdir()), f"left behind {sorted(project.rglob('*'))}"

    def test_uninstall_removes_exactly_ours(self, harness: str, host: Any, info: Any,
                                            fm_home: Home, project: Path) -> None:
        from firstmate.configfiles import BACKUP_SUFFIX

        user = self.user_config_files(info)
        for rel, data in user.items():
            (project / rel).parent.mkdir(parents=True, exist_ok=True)
            (project / rel).write_bytes(data)
        host.install(fm_home, self.options(harness, project))
        for rel, data in user.items():
            now = (project / rel).read_bytes()
            if rel.endswith(".json"):
                assert json_contains(json.loads(now), json.loads(data)), f"install lost {rel}"
            else:
                assert data.decode().strip() in now.decode(), f"install lost text of {rel}"
        host.uninstall(fm_home, self.options(harness, project))
        for rel, data in user.items():
            now = (project / rel).read_bytes()
            if rel.endswith(".json"):
                assert json.loads(now) == json.loads(data), f"uninstall did not restore {rel}"
            else:
                assert now == data, f"uninstall did not restore {rel}"
        left = {rel for rel in snapshot(project) if not rel.endswith(BACKUP_SUFFIX)}
        assert left == set(user), f"uninstall left {sorted(left - set(user))}"
        for rel in left:
            assert f"hook {harness}" not in (project / rel).read_text(), rel

    def test_a_foreign_file_where_ours_goes_is_refused_untouched(
            self, harness: str, host: Any, info: Any, fm_home: Home, project: Path) -> None:
        from firstmate.errors import FirstmateError

        if not info.owned_files:
            pytest.skip(f"{harness} writes no whole files")
        host.install(fm_home, self.options(harness, project))
        for rel in info.owned_files:
            assert (project / rel).is_file(), f"install did not write {rel}"
        host.uninstall(fm_home, self.options(harness, project))
        first = project / info.owned_files[0]
        first.parent.mkdir(parents=True, exist_ok=True)
        foreign = b"// somebody else's file with the same name\n"
        first.write_bytes(foreign)
        with pytest.raises(FirstmateError) as refused:
            host.install(fm_home, self.options(harness, project))
        assert "\n" not in str(refused.value) and str(first) in str(refused.value)
        with pytest.raises(FirstmateError):
            host.uninstall(fm_home, self.options(harness, project))
        assert first.read_bytes() == foreign

    def test_an_in_process_install_launches_a_bridge_that_answers(
            self, harness: str, host: Any, info: Any, fm_home: Home, fm_env: Mapping[str, str],
            project: Path) -> None:
        """The installed ``launch.json`` starts this harness's ``fm bridge``, which welcomes the
        shim with the delivery its profile names and ends cleanly at end of input."""
        if info.family != "in-process":
            pytest.skip(f"{harness} is woken through hooks, not a bridge")
        profile = host.bridge_profile(harness)
        assert profile is not None and profile.harness == harness
        host.install(fm_home, self.options(harness, project))
        launch = [project / rel for rel in info.owned_files if rel.endswith("launch.json")]
        assert launch, f"{harness} installs no launch.json"
        argv = json.loads(launch[0].read_text())["argv"]
        assert argv[-2:] == ["bridge", harness] or argv[-4:-2] == ["bridge", harness]
        hello = {"type": "hello", "protocol": 1, "harness": harness, "shim": "contract",
                 "pid": os.getpid(), "cwd": str(project), "argv": [], "restart": False}
        done = subprocess.run(argv, input=json.dumps(hello) + "\n", capture_output=True,
                              text=True, env=dict(fm_env), timeout=DEADLINE * 2, check=False)
        assert done.returncode == 0, done.stderr
        welcome = json.loads(done.stdout.splitlines()[0])
        assert welcome["type"] == "welcome" and welcome["delivery"] == profile.delivery

    def test_fm_install_and_uninstall_from_the_command_line(
            self, harness: str, fm_env: Mapping[str, str], project: Path) -> None:
        def fm(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(fm_command(*args, harness, "--project", str(project)),
                                  env=dict(fm_env), text=True, capture_output=True,
                                  timeout=DEADLINE * 2, check=False)

        done = fm("install")
        assert done.returncode == 0, done.stderr
        installed = snapshot(project)
        assert installed, f"fm install {harness} wrote nothing"
        assert fm("install").returncode == 0 and snapshot(project) == installed
        undone = fm("uninstall")
        assert undone.returncode == 0, undone.stderr
        assert not any(project.iterdir()), f"left behind {sorted(project.rglob('*'))}"

    def test_install_into_a_missing_project_is_one_line(self, harness: str, host: Any,
                                                        fm_home: Home, fm_env: Mapping[str, str],
                                                        tmp_path: Path) -> None:
        from firstmate.errors import FirstmateError

        missing = tmp_path / "no-such-project"
        for hook in (host.install, host.uninstall):
            with pytest.raises(FirstmateError):
                hook(fm_home, self.options(harness, missing))
        for verb in ("install", "uninstall"):
            done = subprocess.run(fm_command(verb, harness, "--project", str(missing)),
                                  capture_output=True, text=True, env=dict(fm_env),
                                  timeout=DEADLINE * 2, check=False)
            assert done.returncode == 2, done.stderr
            assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
            assert str(missing) in done.stderr
        assert not missing.exists()

    # --- continuity --------------------------------------------------------------------------

    def test_readiness_reads_arm_status_lines(self, harness: str, host: Any) -> None:
        from firstmate import hookspecs

        if not hasattr(hookspecs, "firstmate_readiness") or not hasattr(host, "readiness"):
            pytest.skip("this core has no firstmate_readiness hook spec yet")
        from firstmate.handoff import ArmRef

        arm = ArmRef(pid=os.getpid(), harness=harness)
        cases = {
            "watcher: started pid=4242 (beacon fresh)": (True, "started", 4242, None),
            "watcher: started pid=4242 (beacon fresh) recovery-generation=7": (True, "started", 4242, "7"),
            "watcher: attached pid=77 (beacon 3s)": (True, "attached", 77, None),
            "watcher: FAILED - no live watcher with a fresh beacon": (False, "failed", None, None),
            "stale: w1": (False, "other", None, None),
        }
        for line, expected in cases.items():
            got = host.readiness(line, arm)
            assert (got.ready, got.kind, got.watcher_pid, got.generation) == expected, line

    # --- continuity: the plugin keeps the fleet watched (firstmate.rearmkit) -----------------

    def test_declares_how_it_rearms(self, harness: str, host: Any, info: Any) -> None:
        """The re-arm path its owner implies is declared, so the contract can drive it."""
        owner = info.rearm_owner
        if owner == "hook":
            assert info.rearm_event in info.hook_events, (
                f"{harness} owns re-arm through a hook but declares no rearm_event among its "
                f"hook_events {info.hook_events}")
        elif owner == "extension":
            assert host.bridge_profile(harness) is not None, (
                f"{harness} owns re-arm in-process but gives no bridge profile")
        elif owner in ("checkpoint", "model-task"):
            assert info.rearm_command, (
                f"{harness}'s model re-arms ({owner}) but it declares no rearm_command")
            assert info.rearm_event in info.hook_events, (
                f"{harness} declares no rearm_event: no stop hook makes its model re-arm")
        else:
            pytest.skip(f"{harness} re-arms through the supervision host")

    def test_a_wake_reaches_the_model_once_and_the_watch_goes_on(
            self, harness: str, host: Any, info: Any, tmp_path: Path) -> None:
        """Two wakes in a row through the declared path, each delivered exactly once; for hook
        and in-process harnesses a successor watcher holds the lock at each delivery."""
        from firstmate import rearmkit

        with rearmkit.continuity_rig(harness, tmp_path, {}) as rig:
            if info.rearm_owner == "hook":
                rearmkit.drive_hook(rig, info)
            elif info.rearm_owner == "extension":
                rearmkit.drive_bridge(rig, info, host.bridge_profile(harness))
            elif info.rearm_owner in ("checkpoint", "model-task"):
                rearmkit.drive_command(rig, info)
            else:
                pytest.skip(f"{harness} re-arms through the supervision host")
            assert len(rig.delivered) == 2

    def test_a_foreign_payload_arms_nothing(self, harness: str, info: Any,
                                            tmp_path: Path) -> None:
        """Another harness's call of the re-arm event neither arms a watcher nor answers."""
        from firstmate import rearmkit

        event = info.rearm_event
        others = [other for other in payload_harnesses() if other != harness]
        if not event or not others:
            pytest.skip("no re-arm hook, or no other harness's payload installed here")
        with rearmkit.continuity_rig(harness, tmp_path, {}) as rig:
            for other in others:
                call = sample_call(other, event)
                if call is None:
                    continue
                payload, env = call
                done = rig.fm("hook", harness, event, stdin=json.dumps(payload),
                              env={**rig.env, **env})
                assert done.returncode == 0 and not done.stdout.strip(), (
                    f"fm hook {harness} {event} answered a {other} payload: {done!r}")
                assert rig.watcher() is None, (
                    f"fm hook {harness} {event} armed a watcher for a {other} payload")
