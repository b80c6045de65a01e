"""Declarative plugins: a hook install spec (firstmate.plugin.hookinstall) and the base classes that
implement the name-guarded hookimpls once (firstmate.plugin.pluginbase), with throwaway harnesses."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
from firstmate import hookimpl
from firstmate.base.errors import UsageError
from firstmate.plugin import hookinstall
from firstmate.plugin import manager as plugins
from firstmate.plugin.handoff import Session
from firstmate.plugin.harness import BridgeProfile, HarnessInfo, HookOutcome, InstallOptions
from firstmate.plugin.hookinstall import FLAT, GROUPED, HookEvent, HookInstallSpec, TextBlock
from firstmate.plugin.pluginbase import HookHarnessPlugin, HookWakePlugin, InProcessHarnessPlugin
from firstmate.plugin.shiminstall import ShimSpec
from firstmate.store.home import Home
from firstmate.testing import snapshot

GROUPED_SPEC = HookInstallSpec(
    harness="testg", path=".testg/settings.json", shape=GROUPED,
    events=(HookEvent("Start", "session-start", {"timeout": 30}, matcher="startup"),
            HookEvent("Stop", "stop", {"async": True, "timeout": 60}, env=("X_MODE=park",))),
    blocks=(TextBlock("AGENTS.md", "Run fm checkpoint.", "firstmate-testg"),),
    notes=("restart testg",), standing_notes=("always said",),
)
FLAT_SPEC = HookInstallSpec(
    harness="testf", path=".testf/hooks.json", shape=FLAT,
    events=(HookEvent("stop", "stop", {"loop_limit": None}),),
    skeleton={"version": 1, "hooks": {}}, required={"version": 1},
    required_note="added the version", notes=("trust the workspace",),
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    made = tmp_path / "project"
    made.mkdir()
    return made


def _options(harness: str, project: Path, **changes: Any) -> InstallOptions:
    return InstallOptions(harness=harness, project=project, **changes)


def test_grouped_install_writes_each_handler_in_order_and_uninstall_removes_it(
        project: Path) -> None:
    result = hookinstall.install(GROUPED_SPEC, _options("testg", project))
    settings = (project / ".testg" / "settings.json").read_text()
    assert json.loads(settings) == {"hooks": {
        "Start": [{"matcher": "startup", "hooks": [
            {"type": "command", "command": "fm hook testg session-start", "timeout": 30}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "env X_MODE=park fm hook testg stop",
                             "async": True, "timeout": 60}]}],
    }}
    stop = json.loads(settings)["hooks"]["Stop"][0]["hooks"][0]
    assert list(stop) == ["type", "command", "async", "timeout"]  # the order an install writes
    assert "<!-- firstmate-testg:begin -->" in (project / "AGENTS.md").read_text()
    assert result.notes == ("restart testg", "always said")
    assert GROUPED_SPEC.config_files() == (".testg/settings.json", "AGENTS.md")
    again = hookinstall.install(GROUPED_SPEC, _options("testg", project))
    assert not again.changed and again.notes == ("always said",)
    hookinstall.uninstall(GROUPED_SPEC, _options("testg", project))
    assert snapshot(project) == {}


def test_flat_install_adds_required_keys_and_says_so(project: Path) -> None:
    path = project / ".testf" / "hooks.json"
    path.parent.mkdir()
    path.write_text('{"hooks": {"stop": [{"command": "./mine.sh"}]}}')
    result = hookinstall.install(FLAT_SPEC, _options("testf", project))
    assert result.notes == ("added the version", "trust the workspace")
    assert json.loads(path.read_text()) == {"hooks": {"stop": [
        {"command": "./mine.sh"}, {"command": "fm hook testf stop", "loop_limit": None}]},
        "version": 1}
    hookinstall.uninstall(FLAT_SPEC, _options("testf", project))
    assert json.loads(path.read_text()) == {"hooks": {"stop": [{"command": "./mine.sh"}]},
                                            "version": 1}


def test_check_names_the_files_an_install_would_still_change(project: Path) -> None:
    stale = hookinstall.check(FLAT_SPEC, _options("testf", project))
    assert [(c.path, c.action) for c in stale] == [(project / ".testf/hooks.json", "created")]
    assert snapshot(project) == {}
    hookinstall.install(FLAT_SPEC, _options("testf", project))
    assert hookinstall.check(FLAT_SPEC, _options("testf", project)) == ()


# --- the base classes ----------------------------------------------------------------------


def _info(name: str, family: str = "hook", **more: Any) -> HarnessInfo:
    return HarnessInfo(name=name, display_name=name.title(), family=family,
                       rearm_owner="hook" if family == "hook" else "extension",
                       wake_channel="test", process_names=(name,), **more)


@attrs.define(eq=False)
class GuardPlugin(HookHarnessPlugin):
    INFO = _info("testf", hook_events=("stop",))
    HOOKS = FLAT_SPEC

    def foreign(self, payload: Mapping[str, Any] | None, env: Mapping[str, str]) -> bool:
        return bool(env.get("OTHER_HARNESS"))

    def on_hook(self, event: str, payload: Mapping[str, Any] | None, home: Home,
                env: Mapping[str, str]) -> HookOutcome | None:
        return HookOutcome(2, "", f"{event}\n")


@attrs.define(eq=False)
class WakePlugin(HookWakePlugin):
    INFO = _info("testg", hook_events=("session-start", "stop"))
    HOOKS = GROUPED_SPEC
    WAKE_RECEIPT = "printed by the parked hook"

    def check_install(self, options: InstallOptions) -> None:
        if options.flag("a") and options.flag("b"):
            raise UsageError("fm install testg takes --a or --b, not both")


@attrs.define(eq=False)
class ShimPlugin(InProcessHarnessPlugin):
    SHIM = ShimSpec(harness="tests", package="fm_none", resource="x.js", marker="m",
                    shim=".tests/x.js", support=".tests/fm", npm_shim="x.js")
    INFO = _info("tests", "in-process", owned_files=SHIM.owned_files())
    BRIDGE = BridgeProfile(harness="tests", delivery="prompt")


def _registered(plugin: object) -> set[str]:
    pm = plugins.new_manager()
    pm.register(plugin, name="test")
    pm.check_pending()
    return {caller.name for caller in pm.get_hookcallers(plugin) or ()}


def test_each_base_registers_exactly_its_hooks() -> None:
    common = {"firstmate_harness_info", "firstmate_crew_launch", "firstmate_install",
              "firstmate_uninstall"}
    assert _registered(GuardPlugin()) == common | {"firstmate_hook", "firstmate_deliver_wake"}
    assert _registered(WakePlugin()) == common | {"firstmate_hook", "firstmate_deliver_wake"}
    assert _registered(ShimPlugin()) == common | {"firstmate_bridge_profile"}


def test_crew_launch_answers_only_its_harness_and_refuses_by_default(tmp_path: Path) -> None:
    from firstmate.plugin.crewlaunch import CrewLaunchRequest

    request = CrewLaunchRequest(crew="w1", cwd=tmp_path, home=tmp_path / "home", brief="b",
                                fm_argv=("/x/fm",), launch_dir=tmp_path / "launch")
    plugin = GuardPlugin()
    assert plugin.firstmate_crew_launch(harness="other", request=request) is None
    with pytest.raises(UsageError, match=r"cannot be launched as a crew.*fm crew add w1"):
        plugin.firstmate_crew_launch(harness="testf", request=request)


def test_hook_answers_only_its_own_harness_events_and_callers(tmp_path: Path) -> None:
    plugin, home = GuardPlugin(), Home(tmp_path / "home")
    call = {"event": "stop", "payload": {}, "home": home, "env": {}}
    assert plugin.firstmate_hook(harness="testf", **call) == HookOutcome(2, "", "stop\n")
    assert plugin.firstmate_hook(harness="claude", **call) is None
    assert plugin.firstmate_hook(harness="testf", **{**call, "event": "start"}) is None
    assert plugin.firstmate_hook(harness="testf", **{**call, "env": {"OTHER_HARNESS": "1"}}) \
        is None


def test_install_and_uninstall_answer_only_their_harness(project: Path) -> None:
    plugin = WakePlugin()
    assert plugin.firstmate_install(options=_options("other", project)) is None
    assert plugin.firstmate_uninstall(options=_options("other", project)) is None
    assert ShimPlugin().firstmate_install(options=_options("other", project)) is None
    result = plugin.firstmate_install(options=_options("testg", project))
    assert result is not None and result.written == (project / ".testg/settings.json",
                                                     project / "AGENTS.md")
    both = _options("testg", project, flags={"a": "true", "b": "true"})
    with pytest.raises(UsageError):
        plugin.firstmate_install(options=both)
    # Uninstall takes our entries out whatever the flags: it never refuses them.
    assert plugin.firstmate_uninstall(options=both) is not None
    assert snapshot(project) == {}


def test_wake_receipt_and_bridge_profile_are_guarded_by_name(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    wake: Any = None  # the receipt depends on the session only
    receipt = WakePlugin().firstmate_deliver_wake(wake=wake, session=Session(home, "testg", {}))
    assert receipt is not None and receipt.delivered
    assert receipt.detail == "printed by the parked hook"
    assert WakePlugin().firstmate_deliver_wake(wake=wake, session=Session(home, "x", {})) is None
    assert ShimPlugin().firstmate_bridge_profile(harness="tests") is ShimPlugin.BRIDGE
    assert ShimPlugin().firstmate_bridge_profile(harness="x") is None
    assert WakePlugin().firstmate_harness_info() is WakePlugin.INFO


def test_crew_launch_values_refuse_what_core_cannot_run() -> None:
    from firstmate.plugin.crewlaunch import CrewFile, CrewLaunch

    for bad in ("", "/etc/passwd", "../x", "a/../../b", "a\\b"):
        with pytest.raises(ValueError, match="relative"):
            CrewFile(bad, "text")
    with pytest.raises(ValueError, match="program"):
        CrewLaunch(argv=())
    with pytest.raises(ValueError):
        CrewLaunch(argv=("x",), prompt="stdin")
    launch = CrewLaunch(argv=["x", 1], files=[CrewFile("a/b.json", "{}")], notes=["n"])
    assert launch.argv == ("x", "1") and launch.files[0].path == "a/b.json"
    assert launch.notes == ("n",) and launch.prompt == "argv"


# --- routing by harness name --------------------------------------------------------------------


@attrs.define(eq=False)
class Greedy:
    """A plugin for harness *name* whose hooks answer whatever harness they are asked about."""

    name: str

    @hookimpl
    def firstmate_harness_info(self) -> HarnessInfo:
        return HarnessInfo(name=self.name, display_name=self.name.title(), family="hook",
                           rearm_owner="hook", wake_channel="exit 2", hook_events=("stop",),
                           process_names=(self.name,))

    @hookimpl
    def firstmate_hook(self, harness: str, event: str) -> HookOutcome:
        return HookOutcome(0, f"{self.name} answered {harness} {event}\n")

    @hookimpl
    def firstmate_bridge_profile(self, harness: str) -> BridgeProfile:
        return BridgeProfile(harness=self.name, delivery="followUp")


def test_a_hook_about_one_harness_reaches_only_the_plugin_that_registered_it(
        tmp_path: Path) -> None:
    """Plugins register their harness once: a call about harness a goes to a's plugin alone,
    even when another plugin (registered later, so asked first) would answer for any name."""
    host = plugins.PluginHost(plugins.new_manager())
    host.pm.register(Greedy("routea"), name="first")
    host.pm.register(Greedy("routeb"), name="second")
    home = Home(tmp_path / "home")
    for harness in ("routea", "routeb"):
        outcome = host.hook(harness, "stop", {}, home, {})
        assert outcome is not None and outcome.stdout == f"{harness} answered {harness} stop\n"
        profile = host.bridge_profile(harness)
        assert profile is not None and profile.harness == harness
    # A harness nobody registered is not answered by a plugin that registered another one.
    assert host.hook("nobody", "stop", {}, home, {}) is None
