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
    :func:`npm_package_flag` (an in-process shim); the values an install answers with:
    :class:`InstallOptions`, :class:`InstallResult`, :class:`FileChange`,
    :class:`InstallProblem`.
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
Answering a hook
    :class:`HookOutcome` (exit code, stdout, stderr in the harness's own terms).
Continuity values
    :class:`Session`, :class:`RearmOwner`, :class:`WakeDelivery`, :class:`DeliveryReceipt`,
    and :class:`BridgeProfile` (how ``fm bridge`` runs an in-process harness).
Services a policy calls
    :func:`park` / :class:`ParkResult` (a parked stop hook's one cycle), :func:`turnend_decision`
    / :class:`TurnEndDecision` (the turn-end guard).
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

    from firstmate.base.errors import FirstmateError, UsageError
    from firstmate.continuity.park import ParkResult, park
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
    from firstmate.plugin.shiminstall import ShimSpec, npm_package_flag
    from firstmate.rearm.chain import StopChain
    from firstmate.rearm.claimpark import ClaimLedgerPark
    from firstmate.rearm.guarded import CheckpointGuard
    from firstmate.rearm.parkedstop import ParkedStop
    from firstmate.rearm.reply import HookReply
    from firstmate.store.home import Home

    hookimpl: pluggy.HookimplMarker

#: Where each exported name is defined (the module imported on first use).
_EXPORTS = {
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
    "ShimSpec": "firstmate.plugin.shiminstall",
    "npm_package_flag": "firstmate.plugin.shiminstall",
    "StopChain": "firstmate.rearm.chain",
    "ClaimLedgerPark": "firstmate.rearm.claimpark",
    "CheckpointGuard": "firstmate.rearm.guarded",
    "ParkedStop": "firstmate.rearm.parkedstop",
    "HookReply": "firstmate.rearm.reply",
    "Home": "firstmate.store.home",
    "hookimpl": "firstmate",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'firstmate.api' has no attribute {name!r}")
    # __import__ with a fromlist returns the module itself (importlib may not be loaded yet).
    value = getattr(__import__(module, fromlist=[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "API_VERSION",
    "FLAT",
    "GROUPED",
    "REARM_OWNERS",
    "BridgeProfile",
    "CheckpointGuard",
    "ClaimLedgerPark",
    "CrewFile",
    "CrewLaunch",
    "CrewLaunchRequest",
    "DeliveryReceipt",
    "FileChange",
    "FirstmateError",
    "GuardProfile",
    "HarnessInfo",
    "Home",
    "HookEvent",
    "HookInstallSpec",
    "HookOutcome",
    "HookReply",
    "InstallFlag",
    "InstallOptions",
    "InstallProblem",
    "InstallResult",
    "ParkResult",
    "ParkedStop",
    "RearmOwner",
    "Session",
    "SessionAnchor",
    "ShimSpec",
    "StopChain",
    "TextBlock",
    "TurnEndDecision",
    "UsageError",
    "UserFile",
    "WakeDelivery",
    "hookimpl",
    "npm_package_flag",
    "park",
    "turnend_decision",
]
