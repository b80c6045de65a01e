"""Which crew status lines concern the captain: the ``FM_CAPTAIN_RE`` pattern
(:mod:`firstmate.base.captain`, re-exported for the watcher and the drain presentation)."""

from __future__ import annotations

from firstmate.base.captain import DEFAULT_CAPTAIN_RE, captain_pattern

__all__ = ["DEFAULT_CAPTAIN_RE", "captain_pattern"]
