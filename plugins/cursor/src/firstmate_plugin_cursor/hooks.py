"""Cursor: what the harness is, how its hooks are installed, and how its stop hook keeps watch.

Cursor awaits its ``stop`` hook, ignores exit 2 there, and submits a non-empty
``followup_message`` as the next user message, so the hook always exits 0 and prints exactly
one JSON object: ``{}`` (let the turn end) or ``{"followup_message": …}``. It parks on the arm
(:data:`REARM`, a parked stop hook core runs), refusing first to end blind while wakes are
queued or a previous park was interrupted. Every follow-up is charged to the conversation's
chain (``FM_CURSOR_TURNEND_*`` knobs: block budget 3, same-reason budget 5, ceiling 180, below
any ``loop_limit`` a user may set), which starts afresh on a new conversation or
``loop_count`` 0.
"""

from __future__ import annotations

from typing import Any

import attrs
from firstmate.api import (
    FLAT,
    CrewLaunch,
    CrewLaunchRequest,
    GuardProfile,
    HarnessInfo,
    HookEvent,
    HookHarnessPlugin,
    HookInstallSpec,
    HookReply,
    McpServerSpec,
    ParkedStop,
    StopChain,
    UserFile,
)

from firstmate_plugin_cursor import gate
from firstmate_plugin_cursor.gate import EVENTS

NAME = "cursor"
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

INFO = HarnessInfo(
    name=NAME,
    display_name="Cursor",
    family="hook",
    rearm_owner="hook",
    wake_channel="stop hook followup_message (exit 0)",
    config_files=(".cursor/hooks.json",),
    hook_events=EVENTS,
    rearm_event="stop",
    process_names=("cursor-agent",),
    package_markers=(("cursor-agent",),),
    guard=GuardProfile(style="follow-up"),
    # A realistic hook call of this harness (its documented hook input), for the contract kit.
    sample_payload={"conversation_id": "c-1", "generation_id": "g-1", "model": "m",
                    "hook_event_name": "{event}", "cursor_version": "2.0.0",
                    "workspace_roots": ["/tmp"], "transcript_path": None,
                    "status": "completed", "loop_count": 0},
    sample_env={"CURSOR_VERSION": "2.0.0"},
    project_env=PROJECT_ENV,
    busy_markers=BUSY_MARKERS,
    sample_user_files=SAMPLE_USER_FILES,
)

#: The stop hook parks on the watcher for a whole cycle.
STOP_TIMEOUT = 28800
#: Seconds a park waits for a wake (``FM_CURSOR_PARK_SECONDS``), below the installed timeout.
PARK_SECONDS = 28000
REARM = ParkedStop(
    reply=HookReply.json("followup_message", allow_stdout="{}", one_line=True),
    park_seconds=PARK_SECONDS,
    park_seconds_env="FM_CURSOR_PARK_SECONDS",
    chain=StopChain.knobs("FM_CURSOR_TURNEND", ceiling=180,
                          conversation_keys=("conversation_id", "session_id"),
                          conversation_env=("CURSOR_CONVERSATION_ID",)),
    drain_first=True,
    # An aborted or errored turn: the user stopped it; never park on that.
    status_key="status",
)
SESSION_START_TIMEOUT = 30
HOOKS = HookInstallSpec(
    harness=NAME,
    path=".cursor/hooks.json",
    # In a git project the project's .cursor/hooks.json is the team's: the hooks (which name
    # this machine's fm) go into ~/.cursor/hooks.json, keyed to the project.
    user_file=UserFile(".cursor", "hooks.json"),
    shape=FLAT,
    events=(
        HookEvent("sessionStart", "session-start", {"timeout": SESSION_START_TIMEOUT}),
        # loop_limit null: Cursor's own cap (5) would end a supervised chain; Firstmate bounds it.
        HookEvent("stop", "stop", {"loop_limit": None, "timeout": STOP_TIMEOUT}),
    ),
    skeleton={"version": 1, "hooks": {}},
    # Cursor ignores a hooks file without this key.
    required={"version": 1},
    required_note=('added "version": 1 to .cursor/hooks.json; Cursor ignored the hooks already '
                   "in it until now"),
    notes=("Cursor reads hooks when it starts: restart it. A project's .cursor/hooks.json runs "
           "only in a trusted workspace (cursor-agent needs --trust).",),
)
#: ``fm mcp`` in the project's ``.cursor/mcp.json`` (kept out of git: it names this machine's
#: fm). Cursor asks once before it starts a server from a project's file.
MCP = McpServerSpec(
    harness=NAME,
    path=".cursor/mcp.json",
    key="mcpServers",
    notes=("Cursor asks once before it starts the firstmate MCP server from .cursor/mcp.json: "
           "approve it when asked (cursor-agent mcp enable firstmate, or --approve-mcps), or "
           "turn it on in Cursor's MCP settings.",),
    by_hand="add it to your own ~/.cursor/mcp.json instead: under mcpServers, firstmate with "
            "the command and args of {argv}",
)


@attrs.define(eq=False)
class CursorPlugin(HookHarnessPlugin):
    """The Cursor harness plugin."""

    INFO = INFO
    HOOKS = HOOKS
    REARM = REARM
    MCP = MCP

    foreign = staticmethod(gate.foreign)

    def crew_launch(self, request: CrewLaunchRequest) -> CrewLaunch:
        from firstmate.api import UsageError

        # cursor-agent reads hooks only from .cursor/hooks.json files (the project's, the
        # user's, the system's): a crew's own turn-end hook would have to go into one of them.
        raise UsageError("Cursor cannot be launched as a crew by fm crew spawn: cursor-agent "
                         "reads its hooks only from .cursor/hooks.json files, so a crew's turn "
                         "ends could not be recorded without changing your project's or your "
                         "own config; start it in a tmux pane yourself and register it with: fm "
                         f"crew add {request.crew} --pane TARGET")


plugin = CursorPlugin()
