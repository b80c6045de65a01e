"""The tmux backend's default busy marker is the union of the plugins' declared markers."""

from __future__ import annotations

from firstmate import hookimpl
from firstmate.app.defaults import CorePlugin
from firstmate.plugin.harness import HarnessInfo
from firstmate.plugin.manager import PluginHost, _register_core, new_manager
from firstmate.watch.backends.tmux import DEFAULT_BUSY_RE, TmuxBackend, busy_pattern


class Marked:
    def __init__(self, name: str, markers: tuple[str, ...]) -> None:
        self.info = HarnessInfo(name=name, display_name=name, family="hook", rearm_owner="hook",
                                wake_channel="stand-in", busy_markers=markers)

    @hookimpl
    def firstmate_harness_info(self) -> HarnessInfo:
        return self.info


def test_no_markers_declared_keeps_the_common_hints() -> None:
    assert busy_pattern(()) == DEFAULT_BUSY_RE
    assert TmuxBackend.from_env({}).busy_in("working (esc to interrupt)\n")
    assert CorePlugin().busy_markers() == ()


def test_the_watcher_backend_matches_any_registered_plugin_marker() -> None:
    pm = new_manager()
    _register_core(pm)
    pm.register(Marked("alpha", ("spinning now", "[")), name="alpha")  # "[" does not compile
    pm.register(Marked("beta", ("busy-beta", "spinning now")), name="beta")
    backend = PluginHost(pm).crew_backend(None, {})  # type: ignore[arg-type]
    assert isinstance(backend, TmuxBackend)
    assert backend.busy_in("x\nSPINNING NOW\n") and backend.busy_in("busy-beta")
    assert not backend.busy_in("esc to interrupt")  # not a registered plugin's marker
    # FM_BUSY_RE still overrides.
    override = PluginHost(pm).crew_backend(None, {"FM_BUSY_RE": "custom"})  # type: ignore[arg-type]
    assert isinstance(override, TmuxBackend) and override.busy_in("custom")
    assert not override.busy_in("busy-beta")
