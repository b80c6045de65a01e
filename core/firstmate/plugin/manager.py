"""The plugin manager: finds harness plugins, isolates their failures, and calls hooks typed.

Plugins are found through the entry-point group ``firstmate.plugins`` (entry-point name = harness
name), read through a cached index (:mod:`firstmate.base.pluginindex`) so that finding them does
not scan every installed distribution's metadata. ``FIRSTMATE_PLUGINS`` (comma list) loads only
the named plugins; ``FIRSTMATE_DISABLE_PLUGINS`` skips the named ones. A plugin that fails to
import is recorded by name and the others still load. Hot paths that need one harness call
:func:`load_harness`, which imports only the module that harness's entry point names.

A plugin registers its harness once, through ``firstmate_harness_info``; a hook about one harness
(its hook entry, install, crew launch, bridge profile, re-arm owner, wake delivery) is then
routed past every plugin of another harness, so a plugin never answers for another harness's
name.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import pluggy

from firstmate import PROJECT
from firstmate.base import names, pluginindex
from firstmate.base.errors import FirstmateError
from firstmate.base.exitcodes import ExitCode
from firstmate.plugin import hookspecs
from firstmate.plugin.harness import (
    BridgeProfile,
    HarnessInfo,
    HookOutcome,
    InstallOptions,
    InstallProblem,
    InstallResult,
    PluginFailure,
)

T = TypeVar("T")

if TYPE_CHECKING:
    from firstmate.plugin.crewlaunch import CrewLaunch, CrewLaunchRequest
    from firstmate.plugin.handoff import (
        ArmRef,
        DeliveryReceipt,
        Handoff,
        HandoffResult,
        Readiness,
        RearmOwner,
        Session,
        WakeDelivery,
    )
    from firstmate.store.home import Home
    from firstmate.watch.backends.base import CrewBackend
    from firstmate.watch.sources.base import Source

ENTRY_POINT_GROUP = names.ENTRY_POINT_GROUP


def _names(value: str | None) -> set[str]:
    return {part.strip() for part in (value or "").split(",") if part.strip()}


@attrs.define(eq=False)
class PluginHost:
    """A loaded plugin manager with a typed façade over its hooks."""

    pm: pluggy.PluginManager
    failures: list[PluginFailure] = attrs.Factory(list)
    #: harness name → distribution version ("" when unknown).
    versions: dict[str, str] = attrs.Factory(dict)

    # --- identity -----------------------------------------------------------------------------

    def _caller(self, hook: str, harness: str) -> Any:
        """*hook*'s caller for *harness*: the plugins that registered other harnesses (through
        ``firstmate_harness_info``) are left out; the harness's own plugin and those that
        register none (the core's, a bridge's delivery, a demo) are asked."""
        others = []
        for impl in self.pm.hook.firstmate_harness_info.get_hookimpls():
            try:
                info = impl.function()
            except Exception:  # a declaration that fails routes nothing; harnesses() says why
                continue
            if isinstance(info, HarnessInfo) and info.name != harness:
                others.append(impl.plugin)
        if not others:
            return getattr(self.pm.hook, hook)
        return self.pm.subset_hook_caller(hook, remove_plugins=others)

    def harnesses(self) -> list[HarnessInfo]:
        infos = [info for info in self.pm.hook.firstmate_harness_info() if info is not None]
        return sorted(infos, key=lambda info: info.name)

    def harness(self, name: str) -> HarnessInfo | None:
        return next((info for info in self.harnesses() if info.name == name), None)

    # --- watching -----------------------------------------------------------------------------

    def watch_sources(self, home: Home, env: Mapping[str, str]) -> list[Source]:
        # pluggy calls the most recently registered plugin first; core defaults are registered
        # first, so reversing puts them (resurface, checks, status, stale, heartbeat) in front.
        backend = self.crew_backend(home, env)
        batches = self.pm.hook.firstmate_watch_sources(home=home, env=env, backend=backend)
        sources: list[Source] = []
        for batch in reversed(batches):
            if batch:
                sources.extend(batch)
        return sources

    def crew_backend(self, home: Home, env: Mapping[str, str]) -> CrewBackend | None:
        backend: CrewBackend | None = self.pm.hook.firstmate_crew_backend(home=home, env=env)
        return backend

    def crew_launch(self, harness: str, request: CrewLaunchRequest) -> CrewLaunch | None:
        """How *harness* starts as the crew *request* describes; None when no plugin says."""
        launch: CrewLaunch | None = self._caller("firstmate_crew_launch", harness)(
            harness=harness, request=request)
        return launch

    # --- continuity -------------------------------------------------------------------------

    def rearm_owner(self, home: Home, session: Session) -> RearmOwner | None:
        """The plugins' answer, else the owner the session's harness declares, else None."""
        from firstmate.plugin.handoff import RearmOwner

        owner: RearmOwner | None = self._caller("firstmate_rearm_owner", session.harness)(
            home=home, session=session)
        if owner is not None:
            return owner
        info = self.harness(session.harness)
        if info is None:
            return None
        return RearmOwner(info.rearm_owner, f"declared by the {info.name} harness")

    def readiness(self, line: str, arm: ArmRef) -> Readiness:
        """The first plugin's reading of *line* (the core plugin answers last)."""
        found: Readiness | None = self.pm.hook.firstmate_readiness(line=line, arm=arm)
        return _answered(found, "firstmate_readiness")

    def confirm_handoff(self, handoff: Handoff) -> HandoffResult:
        """The first plugin's confirmation (the core plugin's ``fm arm --handling-delivered``
        verdict answers last)."""
        result: HandoffResult | None = self.pm.hook.firstmate_confirm_handoff(handoff=handoff)
        return _answered(result, "firstmate_confirm_handoff")

    def deliver_wake(self, wake: WakeDelivery, session: Session) -> DeliveryReceipt | None:
        """The receipt of the plugin that delivered *wake*; None when no plugin took it."""
        receipt: DeliveryReceipt | None = self._caller(
            "firstmate_deliver_wake", session.harness)(wake=wake, session=session)
        return receipt

    def bridge_profile(self, harness: str) -> BridgeProfile | None:
        """How ``fm bridge <harness>`` runs; None when no plugin gives *harness* a bridge."""
        profile: BridgeProfile | None = self._caller("firstmate_bridge_profile", harness)(
            harness=harness)
        return profile

    # --- install and hook entry ---------------------------------------------------------------

    def install(self, home: Home, options: InstallOptions) -> InstallResult | None:
        """The harness's install, what it changes kept in *home* (firstmate.plugin.installkeep:
        originals, the directories made, the project's git kept clean)."""
        from firstmate.plugin import installkeep

        with installkeep.session(home, options.project, dry_run=options.dry_run):
            result: InstallResult | None = self._caller("firstmate_install", options.harness)(
                home=home, options=options)
        return result

    def uninstall(self, home: Home, options: InstallOptions) -> InstallResult | None:
        """The harness's uninstall: what an install changed put back from *home*."""
        from firstmate.plugin import installkeep

        with installkeep.session(home, options.project, dry_run=options.dry_run):
            result: InstallResult | None = self._caller("firstmate_uninstall", options.harness)(
                home=home, options=options)
        return result

    def install_problems(self, home: Home, options: InstallOptions) -> list[InstallProblem]:
        """What the harness's plugin finds wrong with this install beyond staleness."""
        found: list[InstallProblem] | None = self._caller(
            "firstmate_install_problems", options.harness)(home=home, options=options)
        return list(found or ())

    def hook(self, harness: str, event: str, payload: Mapping[str, Any] | None, home: Home,
             env: Mapping[str, str]) -> HookOutcome | None:
        outcome: HookOutcome | None = self._caller("firstmate_hook", harness)(
            harness=harness, event=event, payload=payload, home=home, env=env)
        return outcome

    # --- command line -------------------------------------------------------------------------

    def cli_commands(self) -> dict[str, Any]:
        registry: dict[str, Any] = {}
        self.pm.hook.firstmate_cli_commands(registry=registry)
        return registry


def new_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def _answered(value: T | None, hook: str) -> T:
    if value is None:
        raise FirstmateError(f"no plugin answered {hook}: the core plugin is not registered in "
                             "this plugin manager; build it with firstmate.plugin.manager.load()",
                             exit_code=ExitCode.PLUGIN)
    return value


def _register_core(pm: pluggy.PluginManager) -> None:
    # The core's defaults are a plugin like any other, loaded by name: the plugin layer never
    # imports the layers above it that implement them.
    module = importlib.import_module(names.CORE_PLUGIN_MODULE)
    pm.register(module.CorePlugin(pm), name=names.CORE_PLUGIN_NAME)


def _entry_points() -> list[pluginindex.Entry]:
    return pluginindex.entries()


def load(env: Mapping[str, str] | None = None, *, core: bool = True) -> PluginHost:
    """Load the core defaults and every allowed installed plugin."""
    env = os.environ if env is None else env
    allow = _names(env.get(names.PLUGINS_ENV))
    block = _names(env.get(names.DISABLE_PLUGINS_ENV))
    pm = new_manager()
    host = PluginHost(pm)
    if core:
        _register_core(pm)
    for ep in sorted(_entry_points(), key=lambda ep: ep.name):  # (one entry per name)
        if (allow and ep.name not in allow) or ep.name in block:
            continue
        try:
            plugin = ep.load()
            pm.register(plugin, name=ep.name)
        except Exception as exc:
            host.failures.append(PluginFailure(ep.name, f"{type(exc).__name__}: {exc}"))
            continue
        host.versions[ep.name] = ep.version
    pm.check_pending()
    return host


#: Hosts load_harness built in this process, by harness and disabled list: the manager for a
#: harness is built once per process (a hook and the engine it starts share it).
_HARNESS_HOSTS: dict[tuple[str, str], PluginHost] = {}


def load_harness(name: str, env: Mapping[str, str] | None = None, *,
                 fresh: bool = False) -> PluginHost:
    """The core defaults plus the one plugin for harness *name*, loaded as cheaply as possible
    and once per process (*fresh* builds a host of the caller's own, to register more into).

    Imports only the module that *name*'s entry point names, found in the cached index
    (:mod:`firstmate.base.pluginindex`), never by scanning every distribution's metadata.
    """
    env = os.environ if env is None else env
    disabled = env.get(names.DISABLE_PLUGINS_ENV, "")
    if name in _names(disabled):
        raise FirstmateError(
            f"the {name} plugin is disabled by FIRSTMATE_DISABLE_PLUGINS; remove it from that list",
            exit_code=ExitCode.PLUGIN,
        )
    key = (name, disabled)
    if not fresh and key in _HARNESS_HOSTS:
        return _HARNESS_HOSTS[key]
    host = _build_harness_host(name)
    if not fresh:
        _HARNESS_HOSTS[key] = host
    return host


def _build_harness_host(name: str) -> PluginHost:
    pm = new_manager()
    host = PluginHost(pm)
    _register_core(pm)
    entry = pluginindex.find(name)
    if entry is None:
        from firstmate.plugin.elsewhere import missing

        raise missing(name, _installed_names())
    try:
        plugin = entry.load()
    except Exception as exc:
        raise FirstmateError(
            f"the {name} plugin ({entry.dist or entry.value}) failed to import: "
            f"{type(exc).__name__}: {exc}; reinstall it (fm plugin add {name}) or remove it",
            exit_code=ExitCode.PLUGIN) from exc
    pm.register(plugin, name=name)
    host.versions[name] = entry.version
    pm.check_pending()
    return host


def _installed_names() -> list[str]:
    """The harnesses whose plugins are installed (their entry points)."""
    return [entry.name for entry in _entry_points()]


def require(host: PluginHost, names: Sequence[str]) -> list[str]:
    """The names in *names* that are not loaded."""
    loaded = {info.name for info in host.harnesses()}
    return [name for name in names if name not in loaded]
