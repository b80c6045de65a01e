"""What Codex tells the core beyond its identity: the values core used to know itself.

Kept out of ``hooks.py`` so the hook entry stays small; :data:`DECLARED` is spread into the
plugin's ``HarnessInfo``.
"""

from __future__ import annotations

from typing import Any

#: The interrupt hint the TUI shows only while a turn runs.
BUSY_MARKERS = ("esc to interrupt",)

#: A user's own ``.codex/hooks.json`` and ``AGENTS.md``.
SAMPLE_USER_FILES: dict[str, Any] = {
    ".codex/hooks.json": {
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "echo user", "timeout": 5}]}],
                  "SessionStart": [{"hooks": [{"type": "command", "command": "./hello.sh"}]}]},
    },
    "AGENTS.md": "# Agents\n\nThe user's own instructions stay exactly as written.\n",
}

#: ``fm checkpoint``'s default window was first configured as ``FM_CODEX_WATCH_CHECKPOINT``;
#: it is still honoured after the core's ``FM_CHECKPOINT_SECONDS``.
ENV_ALIASES = {"FM_CHECKPOINT_SECONDS": "FM_CODEX_WATCH_CHECKPOINT"}

DECLARED: dict[str, Any] = {
    "busy_markers": BUSY_MARKERS,
    "sample_user_files": SAMPLE_USER_FILES,
    "env_aliases": ENV_ALIASES,
}
