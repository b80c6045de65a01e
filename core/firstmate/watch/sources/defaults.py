"""The core's event sources, in the order the watcher runs them (resurface is the lead's, in front)."""

from __future__ import annotations

from collections.abc import Mapping

from firstmate.store.home import Home
from firstmate.watch.backends.base import CrewBackend
from firstmate.watch.sources.base import Source


def default_sources(home: Home, env: Mapping[str, str], backend: CrewBackend | None = None) -> list[Source]:
    """checks, status signals and turn ends, stale panes, other hosts' panes, heartbeat.

    *backend* reads crew panes (the plugin-chosen ``firstmate_crew_backend``); None means the
    tmux backend configured from *env*.
    """
    from firstmate.store.crewscan import FleetScan
    from firstmate.watch.backends.hosts import CrewPanes
    from firstmate.watch.backends.tmux import TmuxBackend
    from firstmate.watch.sources.checks import ChecksSource
    from firstmate.watch.sources.heartbeat import HeartbeatSource
    from firstmate.watch.sources.hosts import HostsSource
    from firstmate.watch.sources.queued import QueuedSource
    from firstmate.watch.sources.resurface import from_env as resurface
    from firstmate.watch.sources.stale import StaleSource
    from firstmate.watch.sources.status import StatusSource

    if backend is None:
        backend = TmuxBackend.from_env(env)
    local = backend if isinstance(backend, TmuxBackend) else TmuxBackend.from_env(env)
    fleet = FleetScan(home)
    return [
        resurface(home, env),
        QueuedSource(home),
        ChecksSource(home),
        StatusSource(home, backend, fleet=fleet),
        StaleSource(home, backend, fleet=fleet),
        HostsSource(home, CrewPanes(home, env, local), fleet=fleet),
        HeartbeatSource(home),
    ]
