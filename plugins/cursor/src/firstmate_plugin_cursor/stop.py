"""Cursor's ``stop`` hook: park on the arm and answer with one ``followup_message``.

Cursor awaits the hook, ignores exit 2 on ``stop``, and submits a non-empty
``followup_message`` as the next user message, so this hook always exits 0 and prints exactly
one JSON object: ``{}`` (let the turn end) or ``{"followup_message": …}``.

Order: stand aside when there is nothing to supervise; refuse to end blind while wakes are
queued or a previous park was interrupted (a drain follow-up); otherwise park
(:mod:`firstmate.continuity.park`) and return the wake, or the arm's failure. Every follow-up is charged to
the conversation's chain (:mod:`firstmate.continuity.stopchain`; ``FM_CURSOR_TURNEND_*`` knobs: block budget
3, same-reason budget 5, ceiling 180 — below any ``loop_limit`` a user may set), which starts
afresh on a new conversation or ``loop_count`` 0.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from firstmate.plugin.harness import HookOutcome
from firstmate.store.home import Home

NAME = "cursor"
#: Seconds a park waits for a wake (``FM_CURSOR_PARK_SECONDS``), below the installed timeout.
PARK_SECONDS = 28000
STAND_ASIDE = ("no-payload", "out-of-scope", "no-need", "read-only", "away-owner")
DRAIN = ("FIRSTMATE_OP: Firstmate has unfinished supervision work: {why}. Run fm wake drain, "
         "handle what it shows and run the acknowledgement it prints, and reconcile before "
         "ending the turn. Continuity is automatic; do not arm the watcher by hand.")


def allow(note: str = "") -> HookOutcome:
    return HookOutcome(0, "{}\n", f"firstmate: {note}\n" if note else "")


def followup(text: str) -> HookOutcome:
    message = " ".join(text.split())
    return HookOutcome(0, json.dumps({"followup_message": message}) + "\n")


def conversation_key(payload: Mapping[str, Any], env: Mapping[str, str]) -> str:
    for value in (payload.get("conversation_id"), payload.get("session_id"),
                  env.get("CURSOR_CONVERSATION_ID")):
        if isinstance(value, str) and value:
            return value[:200]
    return "default"


def _queued(home: Home) -> int:
    from firstmate.store import queue
    from firstmate.store.database import open_store

    db = open_store(home)
    try:
        with db.reading() as conn:
            return queue.depth(conn)
    finally:
        db.close()


def cursor_stop(payload: Mapping[str, Any] | None, home: Home,
                env: Mapping[str, str]) -> HookOutcome:
    if not isinstance(payload, Mapping) or not home.state.is_dir():
        return allow()
    if payload.get("status", "completed") != "completed":
        return allow()  # aborted or errored: the user stopped it; never park on that
    from firstmate.continuity import park as parking
    from firstmate.continuity.stopchain import Bounds, spend
    from firstmate.guards.turnend import turnend_decision

    conversation = conversation_key(payload, env)
    count = payload.get("loop_count")
    reset = type(count) is int and count == 0
    bounds = Bounds.from_env(env, "FM_CURSOR_TURNEND", ceiling=180)
    # Our chain bounds replace the guard's "a follow-up already ran" shortcut.
    decision = turnend_decision(NAME, {**payload, "loop_count": 0, "stop_hook_active": False},
                                home=home, env=env)
    if decision.why in STAND_ASIDE:
        return allow()
    why = []
    depth = _queued(home)
    if depth:
        why.append(f"{depth} queued wake{'s' if depth != 1 else ''}")
    if parking.interrupted(home, NAME):
        why.append("an interrupted stop-hook park")
    if why:
        # The chain's notice names the real cause: wakes left unacknowledged, not a broken hook.
        verdict = spend(home, NAME, conversation, "block", (), bounds, reset=reset,
                        blocked=f"to drain {' and '.join(why)}, and they are still there; run "
                                "fm wake drain, handle the wakes and run the acknowledgement "
                                "command it prints")
        if not verdict.allowed:
            return allow(verdict.notice)
        parking.clear_interrupted(home, NAME)
        return followup(DRAIN.format(why=" and ".join(why)))
    from firstmate.base.envnum import env_int

    result = parking.park(home, NAME, env, seconds=env_int(env, "FM_CURSOR_PARK_SECONDS",
                                                           PARK_SECONDS), display_name="Cursor")
    if result.outcome in ("superseded", "timeout"):
        return allow()
    if result.outcome == "wake":
        verdict = spend(home, NAME, conversation, "wake", result.reasons, bounds, reset=reset)
        if not verdict.allowed:
            sys.stderr.flush()
            return allow(f"{verdict.notice}; run fm wake drain")
        return followup(result.text)
    verdict = spend(home, NAME, conversation, "block", (), bounds, reset=reset)
    if not verdict.allowed:
        return allow("Cursor stop-hook arm still fails after the bounded chain. Repair "
                     ".cursor/hooks.json registration and watcher startup before ending blind. "
                     f"({verdict.notice})")
    from firstmate.base.waketext import compose

    return followup(compose((), result.text, "Cursor"))


__all__ = ["PARK_SECONDS", "allow", "conversation_key", "cursor_stop", "followup"]
