"""Whether a ``fm hook grok …`` call is Grok's, and the standard-library-only fast path.

Grok sets ``GROK_HOOK_EVENT`` for its hooks and writes camelCase payloads (``hookEventName``,
``sessionId``); Claude, Cursor and Codex write snake_case.
"""

from __future__ import annotations

import os

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


def _decode(data: bytes) -> dict[str, Any] | None:
    import json

    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def quick_gate(event: str, payload: bytes, env: Mapping[str, str], home: str) -> bool:
    """False when ``fm hook grok <event>`` surely has nothing to do (see docs/hooks.md)."""
    if event not in EVENTS:
        return False
    suspicious = b"hookEventName" not in payload or b"cursor_version" in payload
    if suspicious and foreign(_decode(payload), env):
        return False
    return os.path.isdir(os.path.join(home, "state"))
