"""Whether a ``fm hook claude …`` call is Claude's, and the standard-library-only fast path.

Other harnesses load Claude's settings: Cursor and Grok read ``.claude/settings.json`` (Grok runs
an ``asyncRewake`` hook synchronously, which would wedge its turn) and Codex runs Claude plugin
hooks. A Claude hook therefore stands down when the payload or environment is another
harness's.
"""

from __future__ import annotations

from firstmate.api.gate import away, crew_session, nothing_to_supervise, set_up, top_level_keys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

#: ``fm hook claude <event>`` events, in kebab case.
EVENTS = ("session-start", "stop", "stop-failure")
#: Turn-end events: they stand down while the away record exists (the host owns wakes then).
TURN_END = ("stop", "stop-failure")
#: Payload keys only other harnesses send: Cursor, Grok (camelCase) and Codex.
FOREIGN_KEYS = ("cursor_version", "hookEventName", "turn_id")


def foreign_env(env: Mapping[str, str]) -> bool:
    # GROK_SESSION_ID leaks into child processes, so only these two say "Grok runs this hook".
    return bool(env.get("GROK_AGENT") or env.get("GROK_HOOK_EVENT"))


def foreign(payload: Mapping[str, Any] | None, env: Mapping[str, str]) -> bool:
    """Whether this hook call comes from another harness that loaded Claude's hooks: its
    environment or keys say so, or the payload lacks the ``hook_event_name`` every Claude Code
    hook input carries (a harness Firstmate does not know yet)."""
    if foreign_env(env):
        return True
    if payload is None:
        return False
    return "hook_event_name" not in payload or any(key in payload for key in FOREIGN_KEYS)


def quick_gate(event: str, payload: bytes, env: Mapping[str, str], home: str) -> bool:
    """False when ``fm hook claude <event>`` surely has nothing to do (see docs/hooks.md)."""
    if event not in EVENTS or foreign_env(env) or crew_session(env):
        return False  # not this harness's call, or a crew's own session: never a primary
    suspicious = b"hook_event_name" not in payload or any(k.encode() in payload for k in FOREIGN_KEYS)
    if payload and suspicious and foreign(top_level_keys(payload), env):
        return False
    if not set_up(home):
        return False  # no home has been set up: nothing is supervised
    if event not in TURN_END:
        return True
    return not (away(home) or nothing_to_supervise(home))
