"""The contract between the watcher's pane-reading sources and a crew backend."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class CrewBackend(Protocol):
    """Reads crew panes. Every call is bounded in time and never raises for a missing pane."""

    #: Short stable name (``tmux``).
    name: str
    #: Why the last call could not read its pane (for the triage log), or None after a success.
    last_error: str | None

    def capture(self, target: str) -> str | None:
        """The pane's visible text, or None when it cannot be read (gone, server down, timeout)."""

    def busy(self, target: str) -> bool:
        """True only on positive evidence that the pane's agent is in the middle of a turn."""
