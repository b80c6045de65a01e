"""Whether a ``fm hook cursor …`` call is Cursor's, and the standard-library-only fast path.

``.cursor/hooks.json`` is also read by Grok, and by Pi when it runs with the Cursor provider; a
Cursor hook stands down there. Every payload Cursor sends carries ``cursor_version``.
"""

from __future__ import annotations

from firstmate.api.gate import crew_session, nothing_to_supervise, set_up, top_level_keys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

#: ``fm hook cursor <event>`` events, in kebab case.
EVENTS = ("session-start", "stop")


def foreign_env(env: Mapping[str, str]) -> bool:
    if env.get("GROK_AGENT") or env.get("GROK_HOOK_EVENT"):
        return True
    # Pi hosting Cursor's hooks: Pi's own plugin owns supervision there.
    pi_host = env.get("PI_CODING_AGENT") == "true"
    return pi_host and not (env.get("CURSOR_AGENT") or env.get("CURSOR_INVOKED_AS"))


def foreign(payload: Mapping[str, Any] | None, env: Mapping[str, str]) -> bool:
    """Whether this hook call comes from another harness that loaded Cursor's hooks."""
    if foreign_env(env):
        return True
    if payload is None:
        return False
    return "cursor_version" not in payload or "hookEventName" in payload


def quick_gate(event: str, payload: bytes, env: Mapping[str, str], home: str) -> bool:
    """False when ``fm hook cursor <event>`` surely has nothing to do (see docs/hooks.md)."""
    if event not in EVENTS or crew_session(env) or foreign_env(env):
        return False
    suspicious = b"cursor_version" not in payload or b"hookEventName" in payload
    if suspicious and foreign(top_level_keys(payload), env):
        return False
    if not set_up(home):
        return False  # no home has been set up: nothing is supervised
    return event != "stop" or not nothing_to_supervise(home)


def session_dirs(payload: bytes, env: Mapping[str, str]) -> list[str]:
    """The directories the calling Cursor session works in: ``CURSOR_PROJECT_DIR``, else the
    payload's ``workspace_roots`` (Cursor does not promise a hook's current directory), for a
    user-level hook that answers only for one project (``fm hook cursor … --project DIR``)."""
    named = env.get("CURSOR_PROJECT_DIR", "").strip()
    if named:
        return [named]
    if b"workspace_roots" not in payload:
        return []
    import json

    try:
        roots = json.loads(payload).get("workspace_roots")
    except (ValueError, AttributeError, RecursionError):
        return []
    return [r for r in roots if isinstance(r, str)] if isinstance(roots, list) else []
