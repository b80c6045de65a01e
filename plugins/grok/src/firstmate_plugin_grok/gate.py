"""Whether a ``fm hook grok …`` call is Grok's, and the standard-library-only fast path.

Grok sets ``GROK_HOOK_EVENT`` for its hooks and writes camelCase payloads (``hookEventName``,
``sessionId``); Claude, Cursor and Codex write snake_case.
"""

from __future__ import annotations

from firstmate.api.gate import crew_session, nothing_to_supervise, set_up, top_level_keys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

#: ``fm hook grok <event>`` events, in kebab case.
EVENTS = ("stop",)


def foreign(payload: Mapping[str, Any] | None, env: Mapping[str, str]) -> bool:
    """Whether this hook call comes from another harness."""
    if env.get("GROK_HOOK_EVENT"):
        return False
    if payload is None:
        return False
    return "hookEventName" not in payload or "cursor_version" in payload


def quick_gate(event: str, payload: bytes, env: Mapping[str, str], home: str) -> bool:
    """False when ``fm hook grok <event>`` surely has nothing to do (see docs/hooks.md)."""
    if event not in EVENTS or crew_session(env):
        return False
    suspicious = b"hookEventName" not in payload or b"cursor_version" in payload
    if suspicious and foreign(top_level_keys(payload), env):
        return False
    if not set_up(home):
        return False  # no home has been set up: nothing is supervised
    return event != "stop" or not nothing_to_supervise(home)
