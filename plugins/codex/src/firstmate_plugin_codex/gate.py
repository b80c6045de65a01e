"""Whether a ``fm hook codex …`` call is Codex's, and the standard-library-only fast path.

Codex's Stop payload carries ``turn_id``, which neither Claude nor Cursor nor Grok send.
"""

from __future__ import annotations

from firstmate.api.gate import crew_session, nothing_to_supervise, set_up, top_level_keys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

#: ``fm hook codex <event>`` events, in kebab case.
EVENTS = ("stop",)
#: Payload keys only other harnesses send: Cursor and Grok (camelCase).
FOREIGN_KEYS = ("cursor_version", "hookEventName")


def foreign_env(env: Mapping[str, str]) -> bool:
    return bool(env.get("GROK_AGENT") or env.get("GROK_HOOK_EVENT"))


def foreign(payload: Mapping[str, Any] | None, env: Mapping[str, str]) -> bool:
    """Whether this hook call comes from another harness."""
    if foreign_env(env):
        return True
    if payload is None:
        return False
    return "turn_id" not in payload or any(key in payload for key in FOREIGN_KEYS)


def quick_gate(event: str, payload: bytes, env: Mapping[str, str], home: str) -> bool:
    """False when ``fm hook codex <event>`` surely has nothing to do (see docs/hooks.md)."""
    if event not in EVENTS or crew_session(env) or foreign_env(env):
        return False
    suspicious = b"turn_id" not in payload or any(k.encode() in payload for k in FOREIGN_KEYS)
    if suspicious and foreign(top_level_keys(payload), env):
        return False
    if not set_up(home):
        return False  # no home has been set up: nothing is supervised
    return event != "stop" or not nothing_to_supervise(home)
