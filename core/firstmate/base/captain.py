"""Which crew status lines concern the captain: the ``FM_CAPTAIN_RE`` pattern.

In the standard-library layer, below the watcher and the drain presentation, because both judge
lines with it, the ``fm wake drain`` fast path among them (:mod:`firstmate.store.captain`
re-exports it).
"""

from __future__ import annotations

import re

DEFAULT_CAPTAIN_RE = (
    r"done:|needs-decision:|blocked:|failed:|PR ready|checks green|ready in branch|merged"
)


def captain_pattern(env_value: str | None) -> tuple[re.Pattern[str], bool]:
    """The compiled captain-relevant regex (case-insensitive) and whether *env_value* was
    usable; an empty or invalid value gives the default."""
    if env_value and env_value.strip():
        try:
            return re.compile(env_value, re.IGNORECASE), True
        except re.error:
            return re.compile(DEFAULT_CAPTAIN_RE, re.IGNORECASE), False
    return re.compile(DEFAULT_CAPTAIN_RE, re.IGNORECASE), True


__all__ = ["DEFAULT_CAPTAIN_RE", "captain_pattern"]
