"""Grok: what the harness is, how its hook and rules are installed, and its hook entry.

Grok's hooks cannot wake an idle session; a background task can (each line it prints becomes a
notification). So the model runs ``fm arm`` as a tracked background task, following the rules
file installed here, and a Stop hook guards the turn end.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
from firstmate import hookimpl
from firstmate.configfiles import (
    command_owner,
    hook_command,
    install_result,
    remove_block,
    remove_grouped_hooks,
    require_project,
    update_json,
    update_text,
    upsert_block,
    upsert_grouped_hook,
)
from firstmate.harness import GuardProfile, HarnessInfo, HookOutcome, InstallOptions, InstallResult
from firstmate.home import Home

from firstmate_plugin_grok.declared import DECLARED
from firstmate_plugin_grok.gate import EVENTS, foreign

NAME = "grok"
HOOKS_FILE = ".grok/hooks/firstmate.json"
RULES_FILE = ".grok/rules/firstmate.md"
INFO = HarnessInfo(
    name=NAME,
    display_name="Grok",
    family="protocol",
    rearm_owner="model-task",
    wake_channel="tracked background task running fm arm; Stop hook block",
    config_files=(HOOKS_FILE, RULES_FILE),
    hook_events=EVENTS,
    process_names=("grok",),
    package_markers=(("@vibe-kit", "grok-cli"),),
    guard=GuardProfile(style="block", loop_flags=("stopHookActive", "stop_hook_active")),
    # A realistic hook call of this harness (its documented hook input), for the contract kit.
    sample_payload={"hookEventName": "{Event}", "sessionId": "s-1", "cwd": "/tmp",
                    "workspaceRoot": "/tmp"},
    sample_env={"GROK_HOOK_EVENT": "{Event}", "GROK_AGENT": "1"},
    **DECLARED,
)

#: Grok's default hook timeout is 5 s; the Stop guard decides quickly but not always that fast.
STOP_TIMEOUT = 30

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


def hooks_path(options: InstallOptions) -> Path:
    return options.project / HOOKS_FILE


def rules_path(options: InstallOptions) -> Path:
    return options.project / RULES_FILE


@attrs.define(eq=False)
class GrokPlugin:
    """The Grok harness plugin."""

    @hookimpl
    def firstmate_harness_info(self) -> HarnessInfo:
        return INFO

    @hookimpl
    def firstmate_install(self, options: InstallOptions) -> InstallResult | None:
        if options.harness != NAME:
            return None
        require_project(options)
        owned = command_owner(NAME)
        handler = {"type": "command", "command": hook_command(options, "stop"),
                   "timeout": STOP_TIMEOUT}
        hooks = update_json(hooks_path(options),
                            lambda doc: upsert_grouped_hook(doc, "Stop", handler, owned),
                            remove_ours=lambda doc: remove_grouped_hooks(doc, owned),
                            dry_run=options.dry_run)
        rules = update_text(rules_path(options), lambda text: upsert_block(text, RULES),
                            remove_ours=remove_block, dry_run=options.dry_run)
        notes: tuple[str, ...] = ()
        if hooks.action != "unchanged":
            notes = ("Grok runs project hooks only in a trusted folder (/hooks-trust or --trust).",)
        return install_result(NAME, [hooks, rules], notes, options.dry_run)

    @hookimpl
    def firstmate_uninstall(self, options: InstallOptions) -> InstallResult | None:
        if options.harness != NAME:
            return None
        require_project(options)
        owned = command_owner(NAME)
        hooks = update_json(hooks_path(options), lambda doc: remove_grouped_hooks(doc, owned),
                            remove_ours=lambda doc: remove_grouped_hooks(doc, owned),
                            dry_run=options.dry_run, delete_if_vacant=True,
                            prune_upto=options.project)
        rules = update_text(rules_path(options), remove_block, remove_ours=remove_block,
                            dry_run=options.dry_run, delete_if_vacant=True,
                            prune_upto=options.project)
        return install_result(NAME, [hooks, rules], (), options.dry_run)

    @hookimpl
    def firstmate_hook(self, harness: str, event: str, payload: Mapping[str, Any] | None,
                       home: Home, env: Mapping[str, str]) -> HookOutcome | None:
        if harness != NAME or event not in EVENTS or foreign(payload, env):
            return None
        from firstmate_plugin_grok.stop import grok_stop

        return grok_stop(payload, home, env)


plugin = GrokPlugin()
