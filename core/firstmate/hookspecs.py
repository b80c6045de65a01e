"""The hook specifications of Firstmate, in lifecycle order.

Every hook is called with keyword arguments only. ``docs/hooks.md`` has one section per hook,
headed by its signature; ``tests/docs/test_hooks_doc.py`` keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

from firstmate import PROJECT

if TYPE_CHECKING:
    from firstmate.backends.base import CrewBackend
    from firstmate.harness import HarnessInfo
    from firstmate.home import Home
    from firstmate.sources.base import Source

hookspec = pluggy.HookspecMarker(PROJECT)


# --- identity ---------------------------------------------------------------------------------


@hookspec
def firstmate_harness_info() -> HarnessInfo | None:
    """Describe the harness this plugin integrates. Core plugins return None."""


@hookspec(firstresult=True)
def firstmate_detect_harness(env: Mapping[str, str], payload: Mapping[str, Any] | None) -> str | None:
    """Name the harness that produced *env* and *payload*, or None when it is not yours."""


# --- watching ---------------------------------------------------------------------------------


@hookspec
def firstmate_watch_sources(home: Home, env: Mapping[str, str]) -> Sequence[Source] | None:
    """Contribute watcher event sources, in the order they should run."""


@hookspec(firstresult=True)
def firstmate_crew_backend(home: Home, env: Mapping[str, str]) -> CrewBackend | None:
    """Return the backend that captures crew panes; the first non-None answer wins."""


# --- command line -----------------------------------------------------------------------------


@hookspec
def firstmate_cli_commands(registry: dict[str, Any]) -> None:
    """Add ``fm`` sub-commands: set ``registry[name] = callable(argv) -> int``."""
