"""What omp tells the core beyond its identity: the values core used to know itself.

Kept out of ``hooks.py`` so the hook entry stays small; :data:`DECLARED` is spread into the
plugin's ``HarnessInfo``.
"""

from __future__ import annotations

from typing import Any

#: The interrupt hint the TUI shows only while a turn runs.
BUSY_MARKERS = ("esc to interrupt",)

DECLARED: dict[str, Any] = {"busy_markers": BUSY_MARKERS}
