"""Claude Code: what the harness is, how its hooks are installed, and how its hooks keep watch.

Claude runs ``fm hook claude stop`` (or ``stop-failure``) in the background after every turn
(``asyncRewake: true``) and wakes the idle session when it exits 2 with text on stderr: the
claim-ledger park core runs (:data:`REARM`; its knobs are ``FM_CLAUDE_AUTOARM_ATTEMPTS`` (1-3,
default 2), ``FM_CLAUDE_STOPFAILURE_COOLDOWN_MS``, ``FM_CLAUDE_AUTOARM_NOTICE_BUDGET``,
``FM_CLAUDE_AUTOARM_EPOCH_FRESH`` and the turn-end guard's ``FM_CLAUDE_TURNEND_BLOCK_BUDGET`` and
``FM_CLAUDE_AUTOARM_SYNC_WAIT_MS``). ``stop_hook_active`` is never consulted: Claude keeps it
true after every rewake. The SessionStart hook takes the session lock and tells the model how
to operate (:mod:`firstmate_plugin_claude.sessionstart`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
from firstmate.api import (
    GROUPED,
    ClaimLedgerPark,
    CrewLaunch,
    CrewLaunchRequest,
    HarnessInfo,
    Home,
    HookEvent,
    HookHarnessPlugin,
    HookInstallSpec,
    HookOutcome,
    HookReply,
    InstallFlag,
    InstallOptions,
    InstallProblem,
    McpApproval,
    McpServerSpec,
    RearmOwner,
    Session,
    SessionAnchor,
    hookimpl,
)

from firstmate_plugin_claude import gate
from firstmate_plugin_claude.gate import EVENTS

NAME = "claude"
#: Claude Code gives its hooks the project directory it runs in.
PROJECT_ENV = ("CLAUDE_PROJECT_DIR",)

#: Print mode with a permission mode that never prompts, Bash and Read only: the supervision
#: host's default engine turn.
HOST_ENGINE = ("claude", "-p", "--permission-mode", "dontAsk", "--allowedTools", "Bash,Read",
               "--model", "sonnet")

#: The interrupt hint the TUI shows only while a turn runs.
BUSY_MARKERS = ("esc to interrupt",)

#: Claude Code's personal settings file (never committed): fm's hooks name this machine's paths.
LOCAL_SETTINGS = ".claude/settings.local.json"
#: The settings file a project commits, where older fm versions put the hooks.
SHARED_SETTINGS = ".claude/settings.json"

#: A user's own ``.claude/settings.local.json``: a model, permissions and hooks of their own.
SAMPLE_USER_FILES: dict[str, Any] = {
    LOCAL_SETTINGS: {
        "model": "opus",
        "permissions": {"allow": ["Bash(ls:*)"], "deny": []},
        "hooks": {
            "Stop": [{"hooks": [{"type": "command", "command": "echo user-stop"}]}],
            "PreToolUse": [{"matcher": "Bash",
                            "hooks": [{"type": "command", "command": "./check.sh", "timeout": 5}]}],
        },
    },
}

#: The Stop and StopFailure hooks: a claim-ledger park whose exit 2 (the wake on stderr) wakes
#: the idle session; a turn that ended in an API error (StopFailure) is paced, not dropped.
REARM = ClaimLedgerPark(
    reply=HookReply(exit_code=2),
    paced_events=("stop-failure",),
    attempts_env="FM_CLAUDE_AUTOARM_ATTEMPTS",
    cooldown_env="FM_CLAUDE_STOPFAILURE_COOLDOWN_MS",
    notices_env="FM_CLAUDE_AUTOARM_NOTICE_BUDGET",
    fresh_env="FM_CLAUDE_AUTOARM_EPOCH_FRESH",
    block_budget_env="FM_CLAUDE_TURNEND_BLOCK_BUDGET",
    sync_wait_env="FM_CLAUDE_AUTOARM_SYNC_WAIT_MS",
)

INFO = HarnessInfo(
    name=NAME,
    display_name="Claude Code",
    family="hook",
    rearm_owner="hook",
    wake_channel="Stop/StopFailure asyncRewake hook: exit 2 with the wake on stderr",
    config_files=(LOCAL_SETTINGS,),
    hook_events=EVENTS,
    rearm_event="stop",
    process_names=("claude",),
    package_markers=(("@anthropic-ai", "claude-code"),),
    guard=REARM.guard,
    # A realistic hook call of this harness (its documented hook input), for the contract kit.
    sample_payload={"session_id": "s-1", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp",
                    "permission_mode": "default", "hook_event_name": "{Event}",
                    "stop_hook_active": False, "last_assistant_message": "done"},
    # Claude Code gives its hooks and tools its pid and session id: the session lock trusts
    # the id while that pid is a Claude process above the caller.
    session_anchor=SessionAnchor(pid_env="CLAUDE_PID", session_env="CLAUDE_CODE_SESSION_ID"),
    project_env=PROJECT_ENV,
    host_engine=HOST_ENGINE,
    busy_markers=BUSY_MARKERS,
    sample_user_files=SAMPLE_USER_FILES,
    install_flags=(InstallFlag("local", "the hooks go into .claude/settings.local.json (your own "
                               "settings, kept out of git); this is the default, and the flag "
                               "is kept so older command lines still work"),),
)

#: The async Stop hook parks on the watcher for a whole cycle; Claude SIGTERMs it at the timeout.
TURN_END_TIMEOUT = 28800
SESSION_START_TIMEOUT = 30
#: Our handler per Claude event. asyncRewake: the turn-end hooks run in the background after
#: the turn ends and wake Claude on exit 2.
HOOKS = HookInstallSpec(
    harness=NAME,
    path=LOCAL_SETTINGS,
    legacy=(SHARED_SETTINGS,),
    shape=GROUPED,
    events=(
        HookEvent("SessionStart", "session-start", {"timeout": SESSION_START_TIMEOUT}),
        HookEvent("Stop", "stop", {"asyncRewake": True, "timeout": TURN_END_TIMEOUT}),
        HookEvent("StopFailure", "stop-failure", {"asyncRewake": True,
                                                  "timeout": TURN_END_TIMEOUT}),
    ),
    notes=("Claude Code reads hooks at session start: restart it, or review the change in "
           "/hooks. StopFailure and asyncRewake need a recent Claude Code.",),
)
#: ``fm mcp`` in the project's ``.mcp.json`` (kept out of git: it names this machine's fm).
#: Claude Code asks whether to use a server it finds there before the session starts (so
#: before the SessionStart hook): the install approves it in the hooks' personal settings.
MCP = McpServerSpec(
    harness=NAME,
    path=".mcp.json",
    key="mcpServers",
    head={"type": "stdio"},
    approval=McpApproval(LOCAL_SETTINGS, "enabledMcpjsonServers"),
    notes=("Claude Code starts the firstmate MCP server in .mcp.json without asking: the "
           "install approved it in .claude/settings.local.json (enabledMcpjsonServers; one you "
           "rejected before stays off until you enable it in /mcp); allow its tools once with "
           "/permissions (mcp__firstmate).",),
    by_hand="add it to your local scope instead: claude mcp add --scope local firstmate -- "
            "{argv}",
)
#: The hooks where older fm versions wrote them, in the settings the project commits: what
#: ``fm doctor`` looks for there (an install moves them out: ``HookInstallSpec.legacy``).
SHARED_HOOKS = attrs.evolve(HOOKS, path=SHARED_SETTINGS, legacy=())


def plugin_dir() -> Path:
    """The Claude Code plugin directory shipped in this distribution (``.claude-plugin/plugin.json``
    and ``hooks/hooks.json``): ``claude --plugin-dir`` or a marketplace entry can point at it."""
    return Path(__file__).resolve().parent / "claude_plugin"


@attrs.define(eq=False)
class ClaudePlugin(HookHarnessPlugin):
    """The Claude Code harness plugin."""

    INFO = INFO
    HOOKS = HOOKS
    MCP = MCP
    REARM = REARM

    foreign = staticmethod(gate.foreign)

    def crew_launch(self, request: CrewLaunchRequest) -> CrewLaunch:
        from firstmate_plugin_claude import crew

        return crew.launch(request)

    @hookimpl
    def firstmate_install_problems(self, home: Home, options: InstallOptions) -> list[InstallProblem] | None:
        if options.harness != self.name:
            return None
        from firstmate_plugin_claude import installcheck

        return installcheck.problems(options, HOOKS, SHARED_HOOKS)

    def on_hook(self, event: str, payload: Mapping[str, Any] | None, home: Home,
                env: Mapping[str, str]) -> HookOutcome | None:
        if not home.state.is_dir():
            return HookOutcome.silent()  # no home was ever set up: nothing is supervised
        from firstmate_plugin_claude.sessionstart import session_start

        return session_start(payload, home, env)

    @hookimpl
    def firstmate_rearm_owner(self, home: Home, session: Session) -> RearmOwner | None:
        if session.harness != NAME:
            return None
        return RearmOwner("hook", "Stop/StopFailure asyncRewake hook (fm hook claude stop)")


plugin = ClaudePlugin()
