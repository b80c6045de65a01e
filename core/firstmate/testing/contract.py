"""The harness contract: the checks every harness plugin must pass (see
``tests/contract/test_harness_contract.py``)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from firstmate.store.home import Home
from firstmate.testing.procs import DEADLINE, fm_command
from firstmate.testing.samples import (
    GARBAGE_PAYLOADS,
    HOOK_GARBAGE_EXITS,
    garbage_payload,
    json_contains,
    payload_harnesses,
    sample_call,
    sample_of,
    snapshot,
    user_file_bytes,
)


class HarnessContract:
    """Checks every harness plugin must pass. Subclass with a ``harness`` fixture (a harness
    name); each check is a plain pytest test method. Override :meth:`user_config_files` to
    give the install checks your harness's realistic pre-existing files."""

    # --- fixtures and helpers ----------------------------------------------------------------

    @pytest.fixture
    def host(self, harness: str) -> Any:
        from firstmate.plugin.manager import load_harness

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
        from firstmate.plugin.harness import InstallOptions

        return InstallOptions(harness=harness, project=project, **changes)

    # --- identity ----------------------------------------------------------------------------

    def test_declares_harness_info_under_its_entry_point_name(self, harness: str, plugin: object) -> None:
        from firstmate.plugin.harness import HarnessInfo

        info = plugin.firstmate_harness_info()  # type: ignore[attr-defined]
        assert isinstance(info, HarnessInfo)
        assert info.name == harness
        assert info.display_name

    def test_found_by_entry_point_scan(self, harness: str) -> None:
        from firstmate.plugin.manager import load

        host = load()
        assert harness in {info.name for info in host.harnesses()}
        assert not [f for f in host.failures if f.name == harness]

    def test_its_processes_are_found_by_the_session_lock(self, harness: str, info: Any) -> None:
        """The session lock finds the harness above an ``fm`` process only by what the plugin
        declares (core knows no harness): every harness names its process."""
        from firstmate.plugin.harnessprocs import HarnessTable, harness_of
        from firstmate.store.identity import ProcInfo

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
        from firstmate.plugin.manager import load

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
        from firstmate.plugin.harness import HookOutcome

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
        from firstmate.plugin.harness import InstallResult

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
        from firstmate.plugin.configfiles import BACKUP_SUFFIX

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
        from firstmate.base.errors import FirstmateError

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
        from firstmate.base.errors import FirstmateError

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

    def test_an_undeclared_install_flag_is_refused_naming_the_declared_ones(
            self, harness: str, info: Any, fm_env: Mapping[str, str], project: Path) -> None:
        for verb in ("install", "uninstall"):
            done = subprocess.run(fm_command(verb, harness, "--project", str(project),
                                             "--no-such-flag"),
                                  capture_output=True, text=True, env=dict(fm_env),
                                  timeout=DEADLINE * 2, check=False)
            assert (done.returncode, done.stdout) == (2, ""), done
            [line] = done.stderr.splitlines()
            assert line.startswith(f"fm: {verb}: unknown option --no-such-flag; {harness} "), line
            assert line.endswith(f"; run 'fm {verb} {harness} --help'"), line
            for flag in info.install_flags:
                assert f"--{flag.name}" in line, line
        assert not any(project.iterdir()), f"wrote {sorted(project.rglob('*'))}"

    def test_every_declared_install_flag_is_described_and_accepted(
            self, harness: str, plugin: object, info: Any, fm_env: Mapping[str, str],
            project: Path, tmp_path: Path) -> None:
        from firstmate.plugin.pluginbase import InProcessHarnessPlugin
        from firstmate.plugin.shiminstall import NPM_FLAG

        if isinstance(plugin, InProcessHarnessPlugin):  # its shim install reads --npm-package
            assert NPM_FLAG in {flag.name for flag in info.install_flags}

        def fm(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(fm_command("install", harness, *args), capture_output=True,
                                  text=True, env=dict(fm_env), timeout=DEADLINE * 2, check=False)

        helped = fm("--help")
        assert (helped.returncode, helped.stderr) == (0, ""), helped
        text = " ".join(helped.stdout.split())
        for flag in info.install_flags:
            assert f"--{flag.name}" in text and " ".join(flag.help.split()) in text, flag
            value = [f"--{flag.name}={tmp_path / 'flag value'}"] if flag.metavar else [f"--{flag.name}"]
            done = fm("--project", str(project), "--dry-run", "--json", *value)
            assert done.returncode == 0, (flag, done.stderr)
            assert json.loads(done.stdout)["dry_run"] is True
        assert not any(project.iterdir()) and not (tmp_path / "flag value").exists()

    # --- continuity --------------------------------------------------------------------------

    def test_readiness_reads_arm_status_lines(self, harness: str, host: Any) -> None:
        from firstmate.plugin import hookspecs

        if not hasattr(hookspecs, "firstmate_readiness") or not hasattr(host, "readiness"):
            pytest.skip("this core has no firstmate_readiness hook spec yet")
        from firstmate.plugin.handoff import ArmRef

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

    # --- continuity: the plugin keeps the fleet watched (firstmate.testing.rearm) -----------------

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

    # --- fm crew spawn ------------------------------------------------------------------------

    def test_a_crew_launch_records_turn_ends_outside_the_project(
            self, harness: str, host: Any, project: Path, tmp_path: Path) -> None:
        """``firstmate_crew_launch`` answers only for its own harness; its answer gives the
        brief, and names its crew-mode config (inside the crew's launch directory, never the
        project) and the turn-end command, or it refuses in one line (a plugin that does not
        implement it is skipped)."""
        from firstmate.base.errors import UsageError
        from firstmate.plugin.crewlaunch import CrewLaunchRequest

        request = CrewLaunchRequest(
            crew="contract-crew", cwd=project, home=tmp_path / "home",
            brief="BRIEF-of-the-contract-crew", fm_argv=("/opt/firstmate/bin/fm",),
            launch_dir=tmp_path / "launch", extra_args=("--extra-arg",))
        assert host.crew_launch("not-a-harness", request) is None
        try:
            launch = host.crew_launch(harness, request)
        except UsageError as exc:
            assert "\n" not in exc.message and "fm crew add contract-crew" in exc.message
            return
        if launch is None:
            pytest.skip(f"{harness} does not implement firstmate_crew_launch: fm crew spawn "
                        "refuses it")
        words = " ".join((*launch.argv, *launch.env.values()))
        assert "BRIEF-of-the-contract-crew" in words or launch.prompt == "type"
        assert "--extra-arg" in launch.argv
        # The turn-end command is in the argv, the environment or a crew file.
        said = words + "".join(item.text for item in launch.files)
        assert "turn-ended" in said and "contract-crew" in said and "/opt/firstmate/bin/fm" in said
        assert str(project) not in said, "crew-mode config must not name the project's files"
        assert not list(project.iterdir())

    def test_a_wake_reaches_the_model_once_and_the_watch_goes_on(
            self, harness: str, host: Any, info: Any, tmp_path: Path) -> None:
        """Wakes in a row through the declared path, each delivered exactly once; for hook and
        in-process harnesses a successor watcher holds the lock at each delivery, and a hook
        harness parks at every turn end (:data:`firstmate.testing.rearm.TURN_ENDS`)."""
        from firstmate.testing import rearm

        with rearm.continuity_rig(harness, tmp_path, {}) as rig:
            wakes = 2
            if info.rearm_owner == "hook":
                rearm.drive_hook(rig, info)
                wakes = len([calls for calls in rearm.TURN_ENDS if calls])
            elif info.rearm_owner == "extension":
                rearm.drive_bridge(rig, info, host.bridge_profile(harness))
            elif info.rearm_owner in ("checkpoint", "model-task"):
                rearm.drive_command(rig, info)
            else:
                pytest.skip(f"{harness} re-arms through the supervision host")
            assert len(rig.delivered) == wakes

    def test_a_foreign_payload_arms_nothing(self, harness: str, info: Any,
                                            tmp_path: Path) -> None:
        """Another harness's call of the re-arm event neither arms a watcher nor answers."""
        from firstmate.testing import rearm

        event = info.rearm_event
        others = [other for other in payload_harnesses() if other != harness]
        if not event or not others:
            pytest.skip("no re-arm hook, or no other harness's payload installed here")
        with rearm.continuity_rig(harness, tmp_path, {}) as rig:
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
