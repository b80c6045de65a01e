"""Codex's Stop hook: the turn-end guard with our own block cap, or (opt-in) a parked Stop.

Codex reads exit 0 + ``{"decision":"block","reason":…}`` as "continue with *reason* as the next
prompt" and has no numeric cap on such blocks, so every block here is charged to a per-session
chain (:mod:`firstmate.continuity.stopchain`, ``FM_CODEX_STOP_*`` knobs):

* guard mode (default): an unhealthy verdict blocks at most ``FM_CODEX_STOP_BLOCK_BUDGET`` (3)
  times until a healthy watcher is seen again; after that the stop goes through with a
  ``systemMessage`` saying why;
* parked mode (``FM_CODEX_STOP_MODE=park``, installed by ``fm install codex --parked``): the hook
  parks on the arm (:mod:`firstmate.continuity.park`) and blocks with the wake; the chain starts afresh on
  a stop that does not follow a block (``stop_hook_active`` false), and wakes repeating the
  same reason or exceeding ``FM_CODEX_STOP_LOOP_CEILING`` (100) end it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from firstmate.plugin.harness import HookOutcome
from firstmate.store.home import Home

NAME = "codex"
#: Seconds a parked Stop waits for a wake (``FM_CODEX_PARK_SECONDS``); the installed hook
#: timeout is a minute longer so Codex never kills a park that is about to answer.
PARK_TIMEOUT = 3600
#: Guard verdicts that mean "nothing to supervise here": the stop always goes through.
STAND_ASIDE = ("no-payload", "out-of-scope", "no-need", "read-only", "away-owner")


def block(reason: str) -> HookOutcome:
    return HookOutcome(0, json.dumps({"decision": "block", "reason": reason}) + "\n")


def notice(text: str) -> HookOutcome:
    return HookOutcome(0, json.dumps({"systemMessage": f"Firstmate: {text}"}) + "\n")


def _conversation(payload: Mapping[str, Any]) -> str:
    value = payload.get("session_id")
    return value[:200] if isinstance(value, str) and value else "default"


def codex_stop(payload: Mapping[str, Any] | None, home: Home,
               env: Mapping[str, str]) -> HookOutcome:
    if not isinstance(payload, Mapping) or not home.state.is_dir():
        return HookOutcome.silent()
    from firstmate.continuity.stopchain import Bounds, Chain, save, spend
    from firstmate.guards.turnend import turnend_decision

    parked = env.get("FM_CODEX_STOP_MODE", "") == "park"
    conversation = _conversation(payload)
    bounds = Bounds.from_env(env, "FM_CODEX_STOP", ceiling=100)
    # The guard's own "a continuation was already forced" shortcut would end a parked chain
    # after one wake; the chain bounds below are what limit it.
    guard_payload = {**payload, "stop_hook_active": False} if parked else payload
    decision = turnend_decision(NAME, guard_payload, home=home, env=env)
    if decision.why in STAND_ASIDE:
        return HookOutcome.silent()
    if not parked:
        if decision.allowed:
            if decision.why == "healthy":
                save(home, NAME, Chain(conversation))
            return HookOutcome(0, "", decision.text + "\n" if decision.text else "")
        verdict = spend(home, NAME, conversation, "block", (), bounds)
        if not verdict.allowed:
            return notice(f"not blocking this stop: {verdict.notice}")
        return block(decision.text)
    return _parked(payload, home, env, conversation, bounds)


def _parked(payload: Mapping[str, Any], home: Home, env: Mapping[str, str], conversation: str,
            bounds: Any) -> HookOutcome:
    from firstmate.base.envnum import env_int
    from firstmate.continuity.park import park
    from firstmate.continuity.stopchain import spend

    fresh = payload.get("stop_hook_active") is not True
    seconds = env_int(env, "FM_CODEX_PARK_SECONDS", PARK_TIMEOUT)
    result = park(home, NAME, env, seconds=seconds, display_name="Codex")
    if result.outcome in ("superseded", "timeout"):
        return HookOutcome.silent()
    if result.outcome == "wake":
        verdict = spend(home, NAME, conversation, "wake", result.reasons, bounds, reset=fresh)
        if not verdict.allowed:
            return notice(f"not continuing: {verdict.notice}. Run fm wake drain and handle "
                          "what it shows.")
        return block(result.text)
    verdict = spend(home, NAME, conversation, "block", (), bounds, reset=fresh)
    if not verdict.allowed:
        return notice(f"not blocking this stop: {verdict.notice}")
    from firstmate.base.waketext import compose

    return block(compose((), result.text, "Codex"))


__all__ = ["PARK_TIMEOUT", "block", "codex_stop", "notice"]
