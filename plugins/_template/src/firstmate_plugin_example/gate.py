"""Whether a ``fm hook example …`` call is Example's, and the standard-library-only fast path.

``fm hook`` imports this module on every turn before anything else: keep it to the standard
library (docs/hooks.md, "The quick gate").
"""

from __future__ import annotations

from firstmate.api.gate import set_up

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

#: ``fm hook example <event>`` events, in kebab case.
EVENTS = ("stop",)
#: A payload key only Example sends: other harnesses load each other's config files, so a call
#: without it is not ours.
OWN_KEY = "example_session"


def foreign(payload: Mapping[str, Any] | None, env: Mapping[str, str]) -> bool:
    """Whether this hook call comes from another harness (unreadable stdin is not foreign)."""
    return payload is not None and OWN_KEY not in payload


def quick_gate(event: str, payload: bytes, env: Mapping[str, str], home: str) -> bool:
    """False when ``fm hook example <event>`` surely has nothing to do."""
    if event not in EVENTS or (payload and OWN_KEY.encode() not in payload):
        return False
    return set_up(home)  # a home never set up supervises nothing
