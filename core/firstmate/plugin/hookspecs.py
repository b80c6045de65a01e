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
    from firstmate.plugin.harness import (
        BridgeProfile,
        HarnessInfo,
        HookOutcome,
        InstallOptions,
        InstallProblem,
        InstallResult,
    )
    from firstmate.store.home import Home
    from firstmate.watch.backends.base import CrewBackend
    from firstmate.watch.sources.base import Source

hookspec = pluggy.HookspecMarker(PROJECT)


# --- identity ---------------------------------------------------------------------------------


@hookspec
def firstmate_harness_info() -> HarnessInfo | None:
    """Describe the harness this plugin integrates. Core plugins return None."""


# --- watching ---------------------------------------------------------------------------------


@hookspec
def firstmate_watch_sources(
    home: Home, env: Mapping[str, str], backend: CrewBackend | None
) -> Sequence[Source] | None:
    """Contribute watcher event sources, in the order they should run.

    *backend* is the crew backend chosen through ``firstmate_crew_backend`` (None when no plugin
    offers one), so every source reads panes through the same backend."""


@hookspec(firstresult=True)
def firstmate_crew_backend(home: Home, env: Mapping[str, str]) -> CrewBackend | None:
    """Return the backend that captures crew panes; the first non-None answer wins."""


@hookspec(firstresult=True)
def firstmate_crew_launch(harness: str, request: CrewLaunchRequest) -> CrewLaunch | None:
    """Say how ``fm crew spawn`` starts harness *harness* as the crew *request* describes: the
    argv (with the brief as the first prompt, or typed in once the pane is ready), the
    environment to add, and the crew-mode config files that record every turn end with
    ``fm crew turn-ended NAME``. Return None unless *harness* is yours; raise a one-line
    UsageError when your harness cannot run as a crew."""


# --- continuity -------------------------------------------------------------------------------


@hookspec(firstresult=True)
def firstmate_rearm_owner(home: Home, session: Session) -> RearmOwner | None:
    """Say who re-arms the watcher for *session* (``hook``, ``extension``, ``checkpoint``,
    ``model-task`` or ``host``). Return None when *session* is not your harness's."""


@hookspec(firstresult=True)
def firstmate_readiness(line: str, arm: ArmRef) -> Readiness | None:
    """Classify one status line the arm *arm* printed. The core reads ``fm arm``'s own lines;
    answer only for an arm command of your own that prints something else."""


@hookspec(firstresult=True)
def firstmate_confirm_handoff(handoff: Handoff) -> HandoffResult | None:
    """Confirm that *handoff*'s successor now carries the handling episode. The core runs
    ``fm arm --handling-delivered``; answer only to confirm some other way."""


@hookspec(firstresult=True)
def firstmate_deliver_wake(wake: WakeDelivery, session: Session) -> DeliveryReceipt | None:
    """Deliver *wake* (``wake.text`` is complete) to the model of *session*. Return None when
    *session* is not your harness's; a receipt with ``delivered=False`` when delivery failed."""


@hookspec(firstresult=True)
def firstmate_bridge_profile(harness: str) -> BridgeProfile | None:
    """Describe how ``fm bridge <harness>`` runs for your in-process harness: which call the shim
    delivers with, whether the arm is retired at shutdown, whether idle queue reads run. Return
    None when *harness* is not yours; a harness with no profile has no bridge."""


# --- install and hook entry -------------------------------------------------------------------


@hookspec(firstresult=True)
def firstmate_install(home: Home, options: InstallOptions) -> InstallResult | None:
    """Write or merge the config files of harness ``options.harness`` under ``options.project``.

    Idempotent (a second install changes no byte), preserves the user's own entries, writes
    nothing when ``options.dry_run``. Return None unless ``options.harness`` is yours.
    """


@hookspec(firstresult=True)
def firstmate_uninstall(home: Home, options: InstallOptions) -> InstallResult | None:
    """Remove exactly what :func:`firstmate_install` wrote; the user's own entries stay.

    Return None unless ``options.harness`` is yours.
    """


@hookspec(firstresult=True)
def firstmate_install_problems(home: Home, options: InstallOptions) -> list[InstallProblem] | None:
    """For ``fm doctor``: what is wrong with the install of harness ``options.harness`` in
    ``options.project`` (made with these options) that a dry-run install cannot show: the
    hooks registered in two of the harness's config files, or both by a harness plugin and in
    its settings. An empty list when nothing is; None unless ``options.harness`` is yours.
    """


@hookspec(firstresult=True)
def firstmate_hook(
    harness: str, event: str, payload: Mapping[str, Any] | None, home: Home, env: Mapping[str, str]
) -> HookOutcome | None:
    """Handle ``fm hook <harness> <event>``: the harness called its hook with *payload* on stdin.

    *payload* is the decoded JSON object, or None when stdin was empty, not JSON, not an object or
    too large. *home* is resolved but not created. Return None unless *harness* is yours and the
    payload and *env* really come from that harness (harnesses load each other's config files).
    """


# --- command line -----------------------------------------------------------------------------


@hookspec
def firstmate_cli_commands(registry: dict[str, Any]) -> None:
    """Add ``fm`` sub-commands: set ``registry[name] = callable(argv) -> int``."""
