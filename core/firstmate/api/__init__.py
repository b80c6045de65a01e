"""The plugin API: everything a Firstmate harness plugin imports, and the whole plugin contract.

A harness plugin imports ``firstmate.api`` (its quick gate ``firstmate.api.gate``) and nothing
else from ``firstmate``; its tests add ``firstmate.testing``. What this module exports, typed and
described in each object's own docstring, *is* the contract, versioned by :data:`API_VERSION`:
a name is added in a minor version and changed or removed only in a major one. Everything is
imported when first used (PEP 562), so ``import firstmate.api`` costs nothing on a hook's
no-work path.

What a plugin finds here, by what it is for:

Declaring a harness
    :class:`HarnessInfo` (what the harness is: names, family, processes, sample payloads),
    :class:`GuardProfile` (how the turn-end guard stops it), :class:`SessionAnchor`,
    :class:`InstallFlag`, :data:`REARM_OWNERS`.
Installing its config
    :class:`HookInstallSpec` with :class:`HookEvent`, :class:`TextBlock`, :class:`UserFile` and
    the shapes :data:`FLAT` / :data:`GROUPED` (a hook harness); :class:`ShimSpec` and
    :func:`npm_package_flag` (an in-process shim); :class:`McpServerSpec` (where the harness
    reads MCP servers, so ``fm install`` registers ``fm mcp`` there: a plugin's ``MCP``) with
    :class:`McpApproval` (where the harness records the server approved); the
    values an install answers with: :class:`InstallOptions`, :class:`InstallResult`,
    :class:`FileChange`, :class:`InstallProblem`.
Starting as a crew
    :class:`CrewLaunchRequest` (what ``fm crew spawn`` asks), :class:`CrewLaunch` and
    :class:`CrewFile` (the answer).
Re-arm strategies (declare one; core runs it for the turn-end events it answers)
    :class:`ParkedStop` (a synchronous stop hook parks on the watcher and answers with the
    wake: Cursor, the template), :class:`CheckpointGuard` (the model re-arms by its protocol,
    the stop hook guards the turn end: Codex, Grok), :class:`ClaimLedgerPark` (a background
    stop hook whose exit wakes the session, admitted once per turn end by a generation claim:
    Claude Code) and, for an in-process harness, :class:`BridgeProfile`. A strategy takes the
    harness's own terms: :class:`HookReply` (how its hook answers) and :class:`StopChain`
    (bounds on continuations, for a harness with no cap of its own).
The plugin's class
    Subclass one: :class:`HookHarnessPlugin` (a harness that runs ``fm hook`` commands; declare
    ``INFO``, ``HOOKS`` and ``REARM``), :class:`HookWakePlugin` (one whose parked hook prints
    the wake), :class:`InProcessHarnessPlugin` (a harness woken through ``fm bridge``; declare
    ``INFO``, ``SHIM`` and ``BRIDGE``) or :class:`HarnessPlugin` (what they share).
    :class:`RearmStrategy` is what a custom strategy provides.
Answering a hook
    :class:`HookOutcome` (exit code, stdout, stderr in the harness's own terms);
    :data:`OP_PREFIX` and :func:`one_line` for the text a hook hands the model.
Continuity values
    :class:`Session`, :class:`RearmOwner`, :class:`WakeDelivery`, :class:`DeliveryReceipt`,
    and :class:`BridgeProfile` (how ``fm bridge`` runs an in-process harness).
Services a policy calls
    :func:`park` / :class:`ParkResult` (a parked stop hook's one cycle), :func:`turnend_decision`
    / :class:`TurnEndDecision` (the turn-end guard), :func:`primary_scope` (is this the
    primary's project), :func:`watcher_health` (is a watcher up), :mod:`session_lock` (the
    session lock: ``acquire``, ``inspect``, ``owned_by_self``, ``SessionLockHeld``),
    :class:`Continuity` (the continuity engine, for a plugin that keeps its own long-lived
    process), :data:`OWNER_ENV` (who owns re-arming, for the hooks it runs),
    :func:`resource_text` (a file shipped in the plugin's package), :func:`crew_extension`
    (the crew extension Pi-style extension harnesses load in crew mode), :func:`uninstall_hooks`
    (a hook spec's uninstall, e.g. as a dry run).
A plugin's own command
    :class:`CommandParser` (fm's one help and error format), :func:`open_home`,
    :func:`env_int` (an integer knob), :mod:`stopsignals` (stop signals as an exception).
The home and errors
    :class:`Home`, :class:`FirstmateError` (a one-line error with an exit code),
    :class:`UsageError` (exit 2).
Markers
    :data:`hookimpl` for the broadcast hooks (docs/hooks.md).
"""

from __future__ import annotations

# Not `typing`: it imports `re`, which costs more than a hook's whole start-up budget.
TYPE_CHECKING = False

#: The plugin contract's version: ``MAJOR.MINOR``. A plugin written for ``1.x`` works with
#: every ``1.y``, ``y >= x``.
API_VERSION = "1.0"

if TYPE_CHECKING:  # pragma: no cover - what mypy and readers see; __getattr__ resolves it
    from typing import Any

    import pluggy

    from firstmate.base import stopsignals
    from firstmate.base.envnum import env_int
    from firstmate.base.errors import FirstmateError, UsageError
    from firstmate.base.waketext import PREFIX as OP_PREFIX
    from firstmate.base.waketext import one_line
    from firstmate.cli.args import Parser as CommandParser
    from firstmate.continuity import session_lock
    from firstmate.continuity.engine import Continuity
    from firstmate.continuity.park import ParkResult, park
    from firstmate.guards.down import OWNER_ENV
    from firstmate.guards.turnend import TurnEndDecision, turnend_decision
    from firstmate.plugin.crewlaunch import CrewFile, CrewLaunch, CrewLaunchRequest
    from firstmate.plugin.handoff import DeliveryReceipt, RearmOwner, Session, WakeDelivery
    from firstmate.plugin.harness import (
        REARM_OWNERS,
        BridgeProfile,
        FileChange,
        GuardProfile,
        HarnessInfo,
        HookOutcome,
        InstallFlag,
        InstallOptions,
        InstallProblem,
        InstallResult,
        SessionAnchor,
    )
    from firstmate.plugin.hookinstall import (
        FLAT,
        GROUPED,
        HookEvent,
        HookInstallSpec,
        TextBlock,
        UserFile,
    )
    from firstmate.plugin.hookinstall import uninstall as uninstall_hooks
    from firstmate.plugin.mcpinstall import McpApproval, McpServerSpec
    from firstmate.plugin.pluginbase import (
        HarnessPlugin,
        HookHarnessPlugin,
        HookWakePlugin,
        InProcessHarnessPlugin,
        RearmStrategy,
    )
    from firstmate.plugin.shiminstall import (
        ShimSpec,
        crew_extension,
        npm_package_flag,
        resource_text,
    )
    from firstmate.rearm.chain import StopChain
    from firstmate.rearm.claimpark import ClaimLedgerPark
    from firstmate.rearm.guarded import CheckpointGuard
    from firstmate.rearm.parkedstop import ParkedStop
    from firstmate.rearm.reply import HookReply
    from firstmate.store.health import watcher_health
    from firstmate.store.home import Home, open_home
    from firstmate.store.scope import primary_scope

    hookimpl: pluggy.HookimplMarker

#: Where each exported name is defined (the module imported on first use), as
#: ``module`` or ``module:name`` when the export is renamed.
_EXPORTS = {
    "stopsignals": "firstmate.base",
    "env_int": "firstmate.base.envnum",
    "OP_PREFIX": "firstmate.base.waketext:PREFIX",
    "one_line": "firstmate.base.waketext",
    "CommandParser": "firstmate.cli.args:Parser",
    "session_lock": "firstmate.continuity",
    "Continuity": "firstmate.continuity.engine",
    "OWNER_ENV": "firstmate.guards.down",
    "FirstmateError": "firstmate.base.errors",
    "UsageError": "firstmate.base.errors",
    "ParkResult": "firstmate.continuity.park",
    "park": "firstmate.continuity.park",
    "TurnEndDecision": "firstmate.guards.turnend",
    "turnend_decision": "firstmate.guards.turnend",
    "CrewFile": "firstmate.plugin.crewlaunch",
    "CrewLaunch": "firstmate.plugin.crewlaunch",
    "CrewLaunchRequest": "firstmate.plugin.crewlaunch",
    "DeliveryReceipt": "firstmate.plugin.handoff",
    "RearmOwner": "firstmate.plugin.handoff",
    "Session": "firstmate.plugin.handoff",
    "WakeDelivery": "firstmate.plugin.handoff",
    "REARM_OWNERS": "firstmate.plugin.harness",
    "BridgeProfile": "firstmate.plugin.harness",
    "FileChange": "firstmate.plugin.harness",
    "GuardProfile": "firstmate.plugin.harness",
    "HarnessInfo": "firstmate.plugin.harness",
    "HookOutcome": "firstmate.plugin.harness",
    "InstallFlag": "firstmate.plugin.harness",
    "InstallOptions": "firstmate.plugin.harness",
    "InstallProblem": "firstmate.plugin.harness",
    "InstallResult": "firstmate.plugin.harness",
    "SessionAnchor": "firstmate.plugin.harness",
    "FLAT": "firstmate.plugin.hookinstall",
    "GROUPED": "firstmate.plugin.hookinstall",
    "HookEvent": "firstmate.plugin.hookinstall",
    "HookInstallSpec": "firstmate.plugin.hookinstall",
    "TextBlock": "firstmate.plugin.hookinstall",
    "UserFile": "firstmate.plugin.hookinstall",
    "uninstall_hooks": "firstmate.plugin.hookinstall:uninstall",
    "McpApproval": "firstmate.plugin.mcpinstall",
    "McpServerSpec": "firstmate.plugin.mcpinstall",
    "HarnessPlugin": "firstmate.plugin.pluginbase",
    "HookHarnessPlugin": "firstmate.plugin.pluginbase",
    "HookWakePlugin": "firstmate.plugin.pluginbase",
    "InProcessHarnessPlugin": "firstmate.plugin.pluginbase",
    "RearmStrategy": "firstmate.plugin.pluginbase",
    "ShimSpec": "firstmate.plugin.shiminstall",
    "npm_package_flag": "firstmate.plugin.shiminstall",
    "resource_text": "firstmate.plugin.shiminstall",
    "crew_extension": "firstmate.plugin.shiminstall",
    "StopChain": "firstmate.rearm.chain",
    "ClaimLedgerPark": "firstmate.rearm.claimpark",
    "CheckpointGuard": "firstmate.rearm.guarded",
    "ParkedStop": "firstmate.rearm.parkedstop",
    "HookReply": "firstmate.rearm.reply",
    "watcher_health": "firstmate.store.health",
    "Home": "firstmate.store.home",
    "open_home": "firstmate.store.home",
    "primary_scope": "firstmate.store.scope",
    "hookimpl": "firstmate",
}


def __getattr__(name: str) -> Any:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'firstmate.api' has no attribute {name!r}")
    module, _, attr = where.partition(":")
    attr = attr or name
    # __import__ with a fromlist returns the module itself (importlib may not be loaded yet).
    value = getattr(__import__(module, fromlist=[attr]), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "API_VERSION",
    "FLAT",
    "GROUPED",
    "OP_PREFIX",
    "OWNER_ENV",
    "REARM_OWNERS",
    "BridgeProfile",
    "CheckpointGuard",
    "ClaimLedgerPark",
    "CommandParser",
    "Continuity",
    "CrewFile",
    "CrewLaunch",
    "CrewLaunchRequest",
    "DeliveryReceipt",
    "FileChange",
    "FirstmateError",
    "GuardProfile",
    "HarnessInfo",
    "HarnessPlugin",
    "Home",
    "HookEvent",
    "HookHarnessPlugin",
    "HookInstallSpec",
    "HookOutcome",
    "HookReply",
    "HookWakePlugin",
    "InProcessHarnessPlugin",
    "InstallFlag",
    "InstallOptions",
    "InstallProblem",
    "InstallResult",
    "McpApproval",
    "McpServerSpec",
    "ParkResult",
    "ParkedStop",
    "RearmOwner",
    "RearmStrategy",
    "Session",
    "SessionAnchor",
    "ShimSpec",
    "StopChain",
    "TextBlock",
    "TurnEndDecision",
    "UsageError",
    "UserFile",
    "WakeDelivery",
    "crew_extension",
    "env_int",
    "hookimpl",
    "npm_package_flag",
    "one_line",
    "open_home",
    "park",
    "primary_scope",
    "resource_text",
    "session_lock",
    "stopsignals",
    "turnend_decision",
    "uninstall_hooks",
    "watcher_health",
]
