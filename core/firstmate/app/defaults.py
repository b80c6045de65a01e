"""The core's own defaults, registered through the same plugin manager as harness plugins."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from firstmate import hookimpl

if TYPE_CHECKING:
    import pluggy

    from firstmate.plugin.handoff import ArmRef, Handoff, HandoffResult, Readiness
    from firstmate.store.home import Home
    from firstmate.watch.backends.base import CrewBackend
    from firstmate.watch.sources.base import Source


@attrs.define(eq=False)
class CorePlugin:
    """Default watch sources, the tmux crew backend, and the continuity defaults (reading
    ``fm arm`` status lines, confirming a handoff with ``fm arm --handling-delivered``)."""

    #: The manager this plugin is registered in: the tmux backend's default busy marker is
    #: the union of the harness plugins registered beside it (no extra plugin loading).
    pm: pluggy.PluginManager | None = None

    def busy_markers(self) -> tuple[str, ...]:
        if self.pm is None:
            return ()
        infos = [info for info in self.pm.hook.firstmate_harness_info() if info is not None]
        return tuple(marker for info in sorted(infos, key=lambda info: info.name)
                     for marker in info.busy_markers)

    @hookimpl
    def firstmate_watch_sources(
        self, home: Home, env: Mapping[str, str], backend: CrewBackend | None
    ) -> Sequence[Source]:
        from firstmate.watch.sources.defaults import default_sources

        return default_sources(home, env, backend)

    @hookimpl
    def firstmate_crew_backend(self, home: Home, env: Mapping[str, str]) -> CrewBackend | None:
        from firstmate.watch.backends.tmux import TmuxBackend

        return TmuxBackend.from_env(env, self.busy_markers())

    # --- continuity (defaults: every harness plugin registered later answers first) -----------

    @hookimpl(trylast=True)
    def firstmate_readiness(self, line: str, arm: ArmRef) -> Readiness:
        from firstmate.plugin.handoff import Readiness

        return Readiness.parse(line)

    @hookimpl(trylast=True)
    def firstmate_confirm_handoff(self, handoff: Handoff) -> HandoffResult:
        from firstmate.continuity.handoffconfirm import confirm_with_arm

        return confirm_with_arm(handoff)

