"""What Claude Code tells the core beyond its identity: the values core used to know itself.

Kept out of ``hooks.py`` so the hook entry stays small; :data:`DECLARED` is spread into the
plugin's ``HarnessInfo``.
"""

from __future__ import annotations

from typing import Any

#: Claude Code gives its hooks the project directory it runs in.
PROJECT_ENV = ("CLAUDE_PROJECT_DIR",)

#: Print mode with a permission mode that never prompts, Bash and Read only: the supervision
#: host's default engine turn.
HOST_ENGINE = ("claude", "-p", "--permission-mode", "dontAsk", "--allowedTools", "Bash,Read",
               "--model", "sonnet")

#: The interrupt hint the TUI shows only while a turn runs.
BUSY_MARKERS = ("esc to interrupt",)

#: A user's own ``.claude/settings.json``: a model, permissions and hooks of their own.
SAMPLE_USER_FILES: dict[str, Any] = {
    ".claude/settings.json": {
        "model": "opus",
        "permissions": {"allow": ["Bash(ls:*)"], "deny": []},
        "hooks": {
            "Stop": [{"hooks": [{"type": "command", "command": "echo user-stop"}]}],
            "PreToolUse": [{"matcher": "Bash",
                            "hooks": [{"type": "command", "command": "./check.sh", "timeout": 5}]}],
        },
    },
}

DECLARED: dict[str, Any] = {
    "project_env": PROJECT_ENV,
    "host_engine": HOST_ENGINE,
    "busy_markers": BUSY_MARKERS,
    "sample_user_files": SAMPLE_USER_FILES,
}
