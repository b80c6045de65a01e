"""Claude Code: what the harness is, how its hooks are installed, and its hook entry."""

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
    remove_grouped_hooks,
    require_project,
    update_json,
    upsert_grouped_hook,
)
from firstmate.handoff import DeliveryReceipt, RearmOwner, Session, WakeDelivery
from firstmate.harness import (
    HarnessInfo,
    HookOutcome,
    InstallOptions,
    InstallResult,
    RearmLedger,
    SessionAnchor,
)
from firstmate.home import Home

from firstmate_plugin_claude.declared import DECLARED
from firstmate_plugin_claude.gate import EVENTS, foreign
from firstmate_plugin_claude.ledger import GUARD

NAME = "claude"
INFO = HarnessInfo(
    name=NAME,
    display_name="Claude Code",
    family="hook",
    rearm_owner="hook",
    wake_channel="Stop/StopFailure asyncRewake hook: exit 2 with the wake on stderr",
    config_files=(".claude/settings.json",),
    hook_events=EVENTS,
    process_names=("claude",),
    package_markers=(("@anthropic-ai", "claude-code"),),
    guard=GUARD,
    # A realistic hook call of this harness (its documented hook input), for the contract kit.
    sample_payload={"session_id": "s-1", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp",
                    "permission_mode": "default", "hook_event_name": "{Event}",
                    "stop_hook_active": False, "last_assistant_message": "done"},
    # Claude Code gives its hooks and tools its pid and session id: the session lock trusts
    # the id while that pid is a Claude process above the caller.
    session_anchor=SessionAnchor(pid_env="CLAUDE_PID", session_env="CLAUDE_CODE_SESSION_ID"),
    **DECLARED,
)

#: The async Stop hook parks on the watcher for a whole cycle; Claude SIGTERMs it at the timeout.
TURN_END_TIMEOUT = 28800
SESSION_START_TIMEOUT = 30
#: Claude event name → our kebab-case event.
EVENT_NAMES = {"SessionStart": "session-start", "Stop": "stop", "StopFailure": "stop-failure"}


def plugin_dir() -> Path:
    """The Claude Code plugin directory shipped in this distribution (``.claude-plugin/plugin.json``
    and ``hooks/hooks.json``): ``claude --plugin-dir`` or a marketplace entry can point at it."""
    return Path(__file__).resolve().parent / "claude_plugin"


def settings_path(options: InstallOptions) -> Path:
    """``.claude/settings.json``, or ``.claude/settings.local.json`` with ``--local``."""
    name = "settings.local.json" if options.flag("local") else "settings.json"
    return options.project / ".claude" / name


def handlers(options: InstallOptions) -> dict[str, dict[str, Any]]:
    """Our handler per Claude event."""
    made: dict[str, dict[str, Any]] = {}
    for claude_event, event in EVENT_NAMES.items():
        handler: dict[str, Any] = {"type": "command", "command": hook_command(options, event)}
        if event == "session-start":
            handler["timeout"] = SESSION_START_TIMEOUT
        else:
            # asyncRewake: runs in the background after the turn ends and wakes Claude on exit 2.
            handler.update(asyncRewake=True, timeout=TURN_END_TIMEOUT)
        made[claude_event] = handler
    return made


@attrs.define(eq=False)
class ClaudePlugin:
    """The Claude Code harness plugin."""

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

        def add(doc: dict[str, Any]) -> dict[str, Any]:
            for claude_event, handler in wanted.items():
                upsert_grouped_hook(doc, claude_event, handler, owned)
            return doc

        change = update_json(settings_path(options), add,
                             remove_ours=lambda doc: remove_grouped_hooks(doc, owned),
                             dry_run=options.dry_run)
        notes = ("Claude Code reads hooks at session start: restart it, or review the change in "
                 "/hooks. StopFailure and asyncRewake need a recent Claude Code.",)
        return install_result(NAME, [change], notes if change.action != "unchanged" else (),
                              options.dry_run)

    @hookimpl
    def firstmate_uninstall(self, options: InstallOptions) -> InstallResult | None:
        if options.harness != NAME:
            return None
        require_project(options)
        owned = command_owner(NAME)
        change = update_json(settings_path(options), lambda doc: remove_grouped_hooks(doc, owned),
                             remove_ours=lambda doc: remove_grouped_hooks(doc, owned),
                             dry_run=options.dry_run, delete_if_vacant=True,
                             prune_upto=options.project)
        return install_result(NAME, [change], (), options.dry_run)

    @hookimpl
    def firstmate_rearm_owner(self, home: Home, session: Session) -> RearmOwner | None:
        if session.harness != NAME:
            return None
        return RearmOwner("hook", "Stop/StopFailure asyncRewake hook (fm hook claude stop)")

    @hookimpl
    def firstmate_deliver_wake(self, wake: WakeDelivery, session: Session) -> \
            DeliveryReceipt | None:
        if wake.harness != NAME:
            return None
        # The hook process itself delivers: it exits 2 with this text on stderr, and Claude
        # wakes the idle session with it.
        return DeliveryReceipt(True, "rewake: the Stop hook exits 2 with the wake on stderr")

    @hookimpl
    def firstmate_rearm_ledger(self, harness: str) -> RearmLedger | None:
        from firstmate_plugin_claude.ledger import ClaudeLedger

        return ClaudeLedger() if harness == NAME else None

    @hookimpl
    def firstmate_hook(self, harness: str, event: str, payload: Mapping[str, Any] | None,
                       home: Home, env: Mapping[str, str]) -> HookOutcome | None:
        if harness != NAME or event not in EVENTS or foreign(payload, env):
            return None
        if not home.state.is_dir():
            return HookOutcome.silent()  # no home was ever set up: nothing is supervised
        if event == "session-start":
            from firstmate_plugin_claude.sessionstart import session_start

            return session_start(payload, home, env)
        from firstmate_plugin_claude.stophook import turn_end

        return turn_end(event, payload, home, env)


plugin = ClaudePlugin()
