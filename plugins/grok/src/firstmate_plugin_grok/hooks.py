"""Grok: what the harness is, how its hook and rules are installed, and its hook entry.

Grok's hooks cannot wake an idle session; a background task can (each line it prints becomes a
notification). So the model runs ``fm arm`` as a tracked background task, following the rules
file installed here, and a Stop hook guards the turn end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from firstmate.api import (
    GROUPED,
    CheckpointGuard,
    CrewLaunch,
    CrewLaunchRequest,
    GuardProfile,
    HarnessInfo,
    Home,
    HookEvent,
    HookHarnessPlugin,
    HookInstallSpec,
    HookOutcome,
    HookReply,
    McpServerSpec,
    RearmStrategy,
    TextBlock,
)

from firstmate_plugin_grok import gate
from firstmate_plugin_grok.gate import EVENTS

NAME = "grok"
HOOKS_FILE = ".grok/hooks/firstmate.json"
RULES_FILE = ".grok/rules/firstmate.md"
#: The interrupt hints the TUI shows only while a turn runs.
BUSY_MARKERS = ("esc to cancel", r"ctrl\+c to interrupt")

INFO = HarnessInfo(
    name=NAME,
    display_name="Grok",
    family="protocol",
    rearm_owner="model-task",
    wake_channel="tracked background task running fm arm; Stop hook block",
    config_files=(HOOKS_FILE, RULES_FILE),
    hook_events=EVENTS,
    rearm_event="stop",
    rearm_command=("arm",),
    process_names=("grok",),
    package_markers=(("@vibe-kit", "grok-cli"),),
    guard=GuardProfile(style="block", loop_flags=("stopHookActive", "stop_hook_active")),
    # A realistic hook call of this harness (its documented hook input), for the contract kit.
    sample_payload={"hookEventName": "{Event}", "sessionId": "s-1", "cwd": "/tmp",
                    "workspaceRoot": "/tmp", "stopHookActive": False},
    sample_env={"GROK_HOOK_EVENT": "{Event}", "GROK_AGENT": "1"},
    busy_markers=BUSY_MARKERS,
)

#: Grok's default hook timeout is 5 s; the Stop guard decides quickly but not always that fast.
STOP_TIMEOUT = 30
#: The model re-arms with a tracked background ``fm arm`` (its rules file); the Stop hook is the
#: turn-end guard, blocking with exit 2 and the banner on stderr.
GUARD = CheckpointGuard(reply=HookReply(exit_code=2))

RULES = """\
# Firstmate supervision (Grok)

This session supervises a fleet through Firstmate. Grok wakes you through the completion of a
tracked background task, so the watcher runs as your own background task:

- Arm with a tracked background task, as its own tool call (`run_terminal_command` with
  `background: true`) running exactly `fm arm`. Never use `&`, `nohup` or a shell job, and never
  run `fm watch` directly. Keep at most one such task.
- Trust only the one status line it prints first:
  - `watcher: started …` or `watcher: attached …`: supervision is live; end the turn.
  - `watcher: FAILED - …`: supervision is broken; fix what it names, then arm again.
- When the task completes (a `task_completed` notification), its last line is the reason
  (`signal:`, `stale:`, `check:` or `heartbeat`). Run `fm wake drain`, handle what it shows, run
  the exact acknowledgement command it printed, then start `fm arm` again as a new background
  task while supervision is still needed.
- The Stop hook may block the end of a turn while supervision is missing; follow its reason.
"""


HOOKS = HookInstallSpec(
    harness=NAME,
    path=HOOKS_FILE,
    shape=GROUPED,
    events=(HookEvent("Stop", "stop", {"timeout": STOP_TIMEOUT}),),
    blocks=(TextBlock(RULES_FILE, RULES),),
    notes=("Grok runs project hooks only in a trusted folder (/hooks-trust or --trust).",),
)
#: ``fm mcp`` as the table ``[mcp_servers.firstmate]`` in the project's ``.grok/config.toml``
#: (kept out of git: it names this machine's fm; the rest of the file kept as written).
MCP = McpServerSpec(
    harness=NAME,
    path=".grok/config.toml",
    key="mcp_servers",
    toml=True,
    notes=("Restart Grok to start the firstmate MCP server (grok mcp list shows it); its tools "
           "reach the model as firstmate__<tool>.",),
    by_hand="add it to your own ~/.grok/config.toml instead: grok mcp add firstmate -- {argv}",
)


@attrs.define(eq=False)
class GrokPlugin(HookHarnessPlugin):
    """The Grok harness plugin."""

    INFO = INFO
    HOOKS = HOOKS
    REARM = GUARD
    MCP = MCP

    foreign = staticmethod(gate.foreign)

    def rearm(self, env: Mapping[str, str],
              payload: Mapping[str, Any] | None = None) -> RearmStrategy | None:
        from firstmate_plugin_grok.stop import native

        # A build that cannot block Stop gets the resume fallback (on_hook) instead.
        return GUARD if not isinstance(payload, Mapping) or native(payload) else None

    def crew_launch(self, request: CrewLaunchRequest) -> CrewLaunch:
        from firstmate.api import UsageError

        # grok reads hooks only from .grok/hooks/ directories (the project's and the user's): a
        # crew's own turn-end hook would have to go into one of them.
        raise UsageError("Grok cannot be launched as a crew by fm crew spawn: grok reads its "
                         "hooks only from .grok/hooks/ directories, so a crew's turn ends could "
                         "not be recorded without changing your project's or your own config; "
                         "start it in a tmux pane yourself and register it with: fm crew add "
                         f"{request.crew} --pane TARGET")

    def on_hook(self, event: str, payload: Mapping[str, Any] | None, home: Home,
                env: Mapping[str, str]) -> HookOutcome | None:
        from firstmate_plugin_grok.stop import resume_fallback

        return resume_fallback(payload, home, env)


plugin = GrokPlugin()
