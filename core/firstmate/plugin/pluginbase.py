"""Base classes for harness plugins: the name-guarded hookimpls every plugin needs, written once.

A plugin subclass declares data (its :class:`~firstmate.plugin.harness.HarnessInfo`, its install spec,
its bridge profile) and only the policy that is its own (what its stop hook does, how it starts
as a crew: :meth:`HarnessPlugin.crew_launch`, ``firstmate_crew_launch``). pluggy finds
the ``@hookimpl`` methods defined here on a subclass instance too (it reads the markers through
``getattr``), so each plugin registers exactly the hooks of the base it picks:

- :class:`HarnessPlugin` (every base below): ``firstmate_harness_info`` and
  ``firstmate_crew_launch`` (name-guarded, then :meth:`HarnessPlugin.crew_launch`, which refuses
  in one line unless the plugin overrides it).
- :class:`HookHarnessPlugin`: ``firstmate_harness_info``, ``firstmate_install``,
  ``firstmate_uninstall`` (from a :class:`~firstmate.plugin.hookinstall.HookInstallSpec`),
  ``firstmate_hook`` (guarded, then its declared re-arm strategy, :attr:`HookHarnessPlugin.REARM`,
  for the events that strategy answers and :meth:`HookHarnessPlugin.on_hook` for the rest) and
  ``firstmate_deliver_wake`` when the strategy's hook hands the wake to the model itself.
- :class:`HookWakePlugin`: the same, for plugins written before strategies (kept as a name).
- :class:`InProcessHarnessPlugin`: ``firstmate_harness_info``, ``firstmate_bridge_profile``,
  ``firstmate_install`` and ``firstmate_uninstall`` (from a
  :class:`~firstmate.plugin.shiminstall.ShimSpec`).

The plugin manager routes a hook about one harness past the plugins of other harnesses
(:meth:`firstmate.plugin.manager.PluginHost._caller`); the name guards here stay for a host
built by hand. A method overridden in a subclass must carry ``@hookimpl`` again: pluggy sees
only the marker of the method the instance resolves to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import attrs

from firstmate import hookimpl

if TYPE_CHECKING:
    from firstmate.plugin.crewlaunch import CrewLaunch, CrewLaunchRequest
    from firstmate.plugin.handoff import DeliveryReceipt, Session, WakeDelivery
    from firstmate.plugin.harness import (
        BridgeProfile,
        HarnessInfo,
        HookOutcome,
        InstallOptions,
        InstallResult,
    )
    from firstmate.plugin.hookinstall import HookInstallSpec
    from firstmate.plugin.mcpinstall import McpServerSpec
    from firstmate.plugin.shiminstall import ShimSpec
    from firstmate.store.home import Home


class RearmStrategy(Protocol):
    """A re-arm strategy core runs for a hook harness's turn end (firstmate.rearm: a parked
    stop hook, a checkpoint guard, a claim-ledger park): a declared value with these three."""

    def events(self, info: HarnessInfo) -> tuple[str, ...]:
        """The hook events the strategy answers."""
        ...

    @property
    def receipt(self) -> str:
        """How a wake the engine delivers in the hook's own process reaches the model ("" when
        the hook delivers no wake)."""
        ...

    def run(self, info: HarnessInfo, event: str, payload: Mapping[str, Any] | None, home: Home,
            env: Mapping[str, str]) -> HookOutcome:
        """One call of the harness's hook for one of :meth:`events`."""
        ...


@attrs.define(eq=False)
class HarnessPlugin:
    """What every harness plugin shares: it declares :attr:`INFO` and answers only for it."""

    INFO: ClassVar[HarnessInfo]
    #: Where the harness reads MCP servers: ``fm install`` registers ``fm mcp`` there with
    #: the hooks or the shim (firstmate.plugin.mcpinstall). None: the harness reads none.
    MCP: ClassVar[McpServerSpec | None] = None

    @property
    def name(self) -> str:
        return self.INFO.name

    @hookimpl
    def firstmate_harness_info(self) -> HarnessInfo:
        return self.INFO

    def crew_launch(self, request: CrewLaunchRequest) -> CrewLaunch:
        """How this harness starts as a crew (``fm crew spawn``). The default refuses in one
        line: a harness whose turn ends cannot be recorded without touching the project's own
        config files cannot be launched as a crew."""
        from firstmate.base.errors import UsageError

        raise UsageError(f"{self.INFO.display_name} cannot be launched as a crew by fm crew spawn; "
                         "start it in a tmux pane yourself and register it with: fm crew add "
                         f"{request.crew} --pane TARGET")

    @hookimpl
    def firstmate_crew_launch(self, harness: str,
                              request: CrewLaunchRequest) -> CrewLaunch | None:
        return self.crew_launch(request) if harness == self.name else None


@attrs.define(eq=False)
class HookHarnessPlugin(HarnessPlugin):
    """A harness that runs ``fm hook <name> <event>`` from a config file: declare :attr:`HOOKS`
    (or choose one per install in :meth:`hook_spec`) and implement :meth:`on_hook`."""

    HOOKS: ClassVar[HookInstallSpec]
    #: The re-arm strategy core runs for the turn-end events it answers (None: every event
    #: goes to :meth:`on_hook`).
    REARM: ClassVar[RearmStrategy | None] = None
    #: How a wake the engine delivers in the hook's process reaches the model ("" = the
    #: strategy's own receipt).
    WAKE_RECEIPT: ClassVar[str] = ""

    def rearm(self, env: Mapping[str, str],
              payload: Mapping[str, Any] | None = None) -> RearmStrategy | None:
        """The strategy for a hook running with *env* on *payload* (None when asked for a
        delivery receipt): a harness with two install modes, or builds that answer differently,
        picks one here; None sends the call to :meth:`on_hook`."""
        return self.REARM

    def hook_spec(self, options: InstallOptions) -> HookInstallSpec:
        """The spec for this install (``--local``, ``--parked``… pick a variant here). Also used
        by uninstall, which removes our entries whatever their options were."""
        return self.HOOKS

    def check_install(self, options: InstallOptions) -> None:
        """Refuse harness flags that cannot go together (raise a UsageError); install only."""

    def foreign(self, payload: Mapping[str, Any] | None, env: Mapping[str, str]) -> bool:
        """Whether a hook call comes from another harness that loaded this one's config."""
        return False

    def on_hook(self, event: str, payload: Mapping[str, Any] | None, home: Home,
                env: Mapping[str, str]) -> HookOutcome | None:
        """``fm hook <name> <event>`` for one of :attr:`INFO`'s events, from this harness."""
        from firstmate.plugin.harness import HookOutcome

        return HookOutcome.silent()

    @hookimpl
    def firstmate_install(self, options: InstallOptions) -> InstallResult | None:
        if options.harness != self.name:
            return None
        from firstmate.plugin import hookinstall, mcpinstall
        from firstmate.plugin.configfiles import require_project

        require_project(options)
        self.check_install(options)
        return mcpinstall.around(self.MCP, options, removing=False,
                                 files=lambda: hookinstall.install(self.hook_spec(options), options))

    @hookimpl
    def firstmate_uninstall(self, options: InstallOptions) -> InstallResult | None:
        if options.harness != self.name:
            return None
        from firstmate.plugin import hookinstall, mcpinstall

        return mcpinstall.around(self.MCP, options, removing=True,
                                 files=lambda: hookinstall.uninstall(self.hook_spec(options), options))

    @hookimpl
    def firstmate_hook(self, harness: str, event: str, payload: Mapping[str, Any] | None,
                       home: Home, env: Mapping[str, str]) -> HookOutcome | None:
        # Harnesses load each other's config files: answer only our own events and callers.
        if harness != self.name or event not in self.INFO.hook_events or \
                self.foreign(payload, env):
            return None
        strategy = self.rearm(env, payload)
        if strategy is not None and event in strategy.events(self.INFO):
            return strategy.run(self.INFO, event, payload, home, env)
        return self.on_hook(event, payload, home, env)

    @hookimpl
    def firstmate_deliver_wake(self, wake: WakeDelivery,
                               session: Session) -> DeliveryReceipt | None:
        if session.harness != self.name:
            return None
        strategy = self.rearm(session.env)
        receipt = self.WAKE_RECEIPT or (strategy.receipt if strategy is not None else "")
        if not receipt:
            return None
        from firstmate.plugin.handoff import DeliveryReceipt

        return DeliveryReceipt(True, receipt)


@attrs.define(eq=False)
class HookWakePlugin(HookHarnessPlugin):
    """A hook harness whose parked hook process delivers the wake (its output is the wake):
    :attr:`WAKE_RECEIPT` (or its strategy's receipt) says how."""


@attrs.define(eq=False)
class InProcessHarnessPlugin(HarnessPlugin):
    """A harness that loads a shim talking to ``fm bridge <name>``: declare :attr:`SHIM` (where
    the shim comes from and goes) and :attr:`BRIDGE` (how the bridge runs)."""

    SHIM: ClassVar[ShimSpec]
    BRIDGE: ClassVar[BridgeProfile]

    @hookimpl
    def firstmate_bridge_profile(self, harness: str) -> BridgeProfile | None:
        return self.BRIDGE if harness == self.name else None

    @hookimpl
    def firstmate_install(self, options: InstallOptions) -> InstallResult | None:
        if options.harness != self.name:
            return None
        from firstmate.plugin import mcpinstall, shiminstall

        return mcpinstall.around(self.MCP, options, removing=False,
                                 files=lambda: shiminstall.install(self.SHIM, options))

    @hookimpl
    def firstmate_uninstall(self, options: InstallOptions) -> InstallResult | None:
        if options.harness != self.name:
            return None
        from firstmate.plugin import mcpinstall, shiminstall

        return mcpinstall.around(self.MCP, options, removing=True,
                                 files=lambda: shiminstall.uninstall(self.SHIM, options))


__all__ = ["HarnessPlugin", "HookHarnessPlugin", "HookWakePlugin", "InProcessHarnessPlugin"]
