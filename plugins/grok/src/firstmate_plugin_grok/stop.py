"""Grok's Stop hook on builds that cannot block: one bounded ``grok --resume`` instead.

Grok builds that honour a Stop block (exit 2, the reason on stderr) say so by sending a boolean
``stopHookActive`` (camelCase; it wins over a snake_case ``stop_hook_active``): then the hook is
the checkpoint guard core runs (``hooks.GUARD``), and a stop that already follows a block goes
through.

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

from firstmate.api import Home, HookOutcome, StopChain

NAME = "grok"
GUARD_ACTIVE_ENV = "GROK_TURNEND_GUARD_ACTIVE"
#: One resume per session until a healthy watcher is seen again.
FALLBACK = StopChain(block_budget=1, block_budget_env="FM_GROK_FALLBACK_BUDGET",
                     conversation_keys=("sessionId",))


def native(payload: Mapping[str, Any]) -> bool:
    """Whether this Grok build blocks Stop natively (it sends a boolean loop flag)."""
    return isinstance(payload.get("stopHookActive"), bool) or isinstance(
        payload.get("stop_hook_active"), bool)


def resume_fallback(payload: Mapping[str, Any] | None, home: Home,
                    env: Mapping[str, str]) -> HookOutcome:
    """The Stop hook of a Grok build that cannot block: resume the session once."""
    if not isinstance(payload, Mapping) or not home.state.is_dir():
        return HookOutcome.silent()
    if env.get(GUARD_ACTIVE_ENV):
        return HookOutcome.silent()  # this is the resumed session's own stop: never chain
    from firstmate.api import turnend_decision

    decision = turnend_decision(NAME, payload, home=home, env=env)
    # A session id goes onto a command line: one with a NUL or another control character (a
    # hostile or broken payload) is no session id at all.
    key = FALLBACK.conversation(payload, env)
    if decision.allowed:
        if decision.why == "healthy" and key:
            FALLBACK.restart(home, NAME, key)
        return HookOutcome.silent()
    if not key:
        return HookOutcome(0, "", "firstmate: Grok sent no sessionId, so the turn-end reminder "
                                  "cannot be delivered; " + " ".join(decision.text.split()) + "\n")
    if not FALLBACK.spend(home, NAME, key, "block", env).allowed:
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


__all__ = ["FALLBACK", "GUARD_ACTIVE_ENV", "native", "resume_fallback"]
