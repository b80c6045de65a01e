"""What Cursor tells the core beyond its identity: the values core used to know itself.

Kept out of ``hooks.py`` so the hook entry stays small; :data:`DECLARED` is spread into the
plugin's ``HarnessInfo``.
"""

from __future__ import annotations

from typing import Any

#: Cursor gives its hooks the project directory it runs in.
PROJECT_ENV = ("CURSOR_PROJECT_DIR",)

#: The interrupt hint the agent's TUI shows only while a turn runs.
BUSY_MARKERS = (r"ctrl\+c to stop",)

#: A user's own ``.cursor/hooks.json``: hooks of their own.
SAMPLE_USER_FILES: dict[str, Any] = {
    ".cursor/hooks.json": {
        "version": 1,
        "hooks": {"stop": [{"command": "./user-stop.sh"}],
                  "afterFileEdit": [{"command": "./fmt.sh"}]},
    },
}

DECLARED: dict[str, Any] = {
    "project_env": PROJECT_ENV,
    "busy_markers": BUSY_MARKERS,
    "sample_user_files": SAMPLE_USER_FILES,
}
