"""Cursor: what the harness is, how its hooks are installed, and its hook entry."""

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
    remove_flat_hooks,
    require_project,
    update_json,
    upsert_flat_hook,
)
from firstmate.handoff import DeliveryReceipt, Session, WakeDelivery
from firstmate.harness import GuardProfile, HarnessInfo, HookOutcome, InstallOptions, InstallResult
from firstmate.home import Home

from firstmate_plugin_cursor.declared import DECLARED
from firstmate_plugin_cursor.gate import EVENTS, foreign

NAME = "cursor"
INFO = HarnessInfo(
    name=NAME,
    display_name="Cursor",
    family="hook",
    rearm_owner="hook",
    wake_channel="stop hook followup_message (exit 0)",
    config_files=(".cursor/hooks.json",),
    hook_events=EVENTS,
    process_names=("cursor-agent",),
    package_markers=(("cursor-agent",),),
    guard=GuardProfile(style="follow-up"),
    # A realistic hook call of this harness (its documented hook input), for the contract kit.
    sample_payload={"conversation_id": "c-1", "generation_id": "g-1", "model": "m",
                    "hook_event_name": "{event}", "cursor_version": "2.0.0",
                    "workspace_roots": ["/tmp"], "transcript_path": None,
                    "status": "completed", "loop_count": 0},
    sample_env={"CURSOR_VERSION": "2.0.0"},
    **DECLARED,
)

#: Cursor ignores a hooks file without this key.
SKELETON = {"version": 1, "hooks": {}}
#: The stop hook parks on the watcher for a whole cycle.
STOP_TIMEOUT = 28800
SESSION_START_TIMEOUT = 30
#: Cursor event name → our kebab-case event.
EVENT_NAMES = {"sessionStart": "session-start", "stop": "stop"}


def hooks_path(options: InstallOptions) -> Path:
    return options.project / ".cursor" / "hooks.json"


def handlers(options: InstallOptions) -> dict[str, dict[str, Any]]:
    """Our handler per Cursor event."""
    return {
        "sessionStart": {"command": hook_command(options, "session-start"),
                         "timeout": SESSION_START_TIMEOUT},
        # loop_limit null: Cursor's own cap (5) would end a supervised chain; Firstmate bounds it.
        "stop": {"command": hook_command(options, "stop"), "loop_limit": None,
                 "timeout": STOP_TIMEOUT},
    }


@attrs.define(eq=False)
class CursorPlugin:
    """The Cursor harness plugin."""

    @hookimpl
    def firstmate_harness_info(self) -> HarnessInfo:
        return INFO

    @hookimpl
    def firstmate_install(self, options: InstallOptions) -> InstallResult | None:
        if options.harness != NAME:
            return None
        require_project(options)
        owned = command_owner(NAME)
        wanted = handlers(options)
        notes: list[str] = []

        def add(doc: dict[str, Any]) -> dict[str, Any]:
            if "version" not in doc:
                doc["version"] = 1
                if doc.get("hooks"):
                    notes.append('added "version": 1 to .cursor/hooks.json; Cursor ignored the '
                                 "hooks already in it until now")
            for cursor_event, handler in wanted.items():
                upsert_flat_hook(doc, cursor_event, handler, owned)
            return doc

        change = update_json(hooks_path(options), add,
                             remove_ours=lambda doc: remove_flat_hooks(doc, owned),
                             skeleton=SKELETON, dry_run=options.dry_run)
        if change.action != "unchanged":
            notes.append("Cursor runs project hooks only in a trusted workspace "
                         "(cursor-agent needs --trust).")
        return install_result(NAME, [change], notes, options.dry_run)

    @hookimpl
    def firstmate_uninstall(self, options: InstallOptions) -> InstallResult | None:
        if options.harness != NAME:
            return None
        require_project(options)
        owned = command_owner(NAME)
        change = update_json(hooks_path(options), lambda doc: remove_flat_hooks(doc, owned),
                             remove_ours=lambda doc: remove_flat_hooks(doc, owned),
                             skeleton=SKELETON, dry_run=options.dry_run, delete_if_vacant=True,
                             prune_upto=options.project)
        return install_result(NAME, [change], (), options.dry_run)

    @hookimpl
    def firstmate_hook(self, harness: str, event: str, payload: Mapping[str, Any] | None,
                       home: Home, env: Mapping[str, str]) -> HookOutcome | None:
        if harness != NAME or event not in EVENTS or foreign(payload, env):
            return None
        if event == "stop":
            from firstmate_plugin_cursor.stop import cursor_stop

            return cursor_stop(payload, home, env)
        return HookOutcome.silent()

    @hookimpl
    def firstmate_deliver_wake(self, wake: WakeDelivery,
                               session: Session) -> DeliveryReceipt | None:
        if session.harness != NAME:
            return None
        # The parked stop hook prints the wake as its followup_message once restoration is done.
        return DeliveryReceipt(True, "returned by the parked stop hook as its followup_message")


plugin = CursorPlugin()
