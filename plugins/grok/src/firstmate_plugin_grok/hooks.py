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
from firstmate.harness import HarnessInfo, HookOutcome, InstallOptions, InstallResult

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
)

#: Grok's default hook timeout is 5 s; the Stop guard decides quickly but not always that fast.
STOP_TIMEOUT = 30

RULES = """\
# Firstmate supervision (Grok)

This session supervises a fleet through Firstmate. Grok wakes you through background-task
notifications, so you own the watcher task:

- At session start, start one tracked background task running `fm arm`. Keep exactly one.
- When that task prints a reason line (`signal:`, `stale:`, `check:` or `heartbeat`) and ends:
  first start a new `fm arm` background task, then run `fm wake drain`, handle what it shows,
  and run the exact `fm wake drain --ack-through … --recovery-generation …` command it printed.
- A `watcher: FAILED - …` line is an alarm: report it, then start `fm arm` again.
- The Stop hook may block the end of a turn while supervision needs you; follow its reason.
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
                       env: Mapping[str, str]) -> HookOutcome | None:
        if harness != NAME or event not in EVENTS or foreign(payload, env):
            return None
        # The Stop guard (stopHookActive-aware block) arrives with the Grok hook behaviour; until
        # then every Grok hook call is a silent no-op.
        return HookOutcome.silent()


plugin = GrokPlugin()
