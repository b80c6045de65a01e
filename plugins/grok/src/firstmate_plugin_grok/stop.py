"""Grok's Stop hook: the turn-end guard, natively when Grok supports Stop blocking.

Grok builds that honour a Stop block (exit 2, the reason on stderr) say so by sending a boolean
``stopHookActive`` (camelCase; it wins over a snake_case ``stop_hook_active``): then the guard
answers natively and a stop that already follows a block goes through.

Older builds send neither and discard what a Stop hook prints. There the hook makes one bounded
fallback instead: it resumes the payload's ``sessionId`` once (``grok --resume <id> <reason>``,
detached, with ``GROK_TURNEND_GUARD_ACTIVE=1`` so the resumed session's own Stop never chains
another), charged to a per-session budget (``FM_GROK_FALLBACK_BUDGET``, 1) that a healthy
watcher resets. The session is never taken from ``GROK_SESSION_ID``: Grok leaks it into child
processes, so it may name another session.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping
from typing import Any

from firstmate.plugin.harness import HookOutcome
from firstmate.store.home import Home

NAME = "grok"
GUARD_ACTIVE_ENV = "GROK_TURNEND_GUARD_ACTIVE"


def native(payload: Mapping[str, Any]) -> bool:
    """Whether this Grok build blocks Stop natively (it sends a boolean loop flag)."""
    return isinstance(payload.get("stopHookActive"), bool) or isinstance(
        payload.get("stop_hook_active"), bool)


def grok_stop(payload: Mapping[str, Any] | None, home: Home,
              env: Mapping[str, str]) -> HookOutcome:
    if not isinstance(payload, Mapping) or not home.state.is_dir():
        return HookOutcome.silent()
    from firstmate.guards.turnend import turnend_decision

    if native(payload):
        return turnend_decision(NAME, payload, home=home, env=env).hook_outcome()  # type: ignore[no-any-return]
    if env.get(GUARD_ACTIVE_ENV):
        return HookOutcome.silent()  # this is the resumed session's own stop: never chain
    decision = turnend_decision(NAME, payload, home=home, env=env)
    from firstmate.continuity.stopchain import Bounds, Chain, save, spend

    session = payload.get("sessionId")
    # A session id goes onto a command line: one with a NUL or another control character (a
    # hostile or broken payload) is no session id at all.
    key = session[:200] if isinstance(session, str) and session.isprintable() else ""
    if decision.allowed:
        if decision.why == "healthy" and key:
            save(home, NAME, Chain(key))
        return HookOutcome.silent()
    if not key:
        return HookOutcome(0, "", "firstmate: Grok sent no sessionId, so the turn-end reminder "
                                  "cannot be delivered; " + " ".join(decision.text.split()) + "\n")
    from firstmate.base.envnum import env_int

    bounds = Bounds(block_budget=env_int(env, "FM_GROK_FALLBACK_BUDGET", 1))
    verdict = spend(home, NAME, key, "block", (), bounds)
    if not verdict.allowed:
        return HookOutcome.silent()
    command = shlex.split(env.get("FM_GROK_COMMAND", "") or "grok")
    child_env = {**env, GUARD_ACTIVE_ENV: "1"}
    try:
        subprocess.Popen([*command, "--resume", key, decision.text], env=child_env,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True,
                         cwd=os.getcwd())
    except (OSError, ValueError) as exc:  # ValueError: an argument the OS cannot take
        return HookOutcome(0, "", f"firstmate: could not resume Grok session {key} with the "
                                  f"turn-end reminder ({exc})\n")
    return HookOutcome(0, "", f"firstmate: resumed Grok session {key} once with the turn-end "
                              "reminder\n")


__all__ = ["GUARD_ACTIVE_ENV", "grok_stop", "native"]
