"""Codex: what the harness is, how its hook and protocol are installed, and how it keeps watch.

Codex cannot be woken by a background process, so supervision is a model protocol (a bounded
foreground ``fm checkpoint``, written into ``AGENTS.md``) backed by a Stop hook guard
(:data:`GUARD`). Codex reads exit 0 + ``{"decision":"block","reason":…}`` as "continue with
*reason* as the next prompt" and has no numeric cap on such blocks, so every block is charged to
a per-session chain (``FM_CODEX_STOP_*`` knobs): an unhealthy verdict blocks at most
``FM_CODEX_STOP_BLOCK_BUDGET`` (3) times until a healthy watcher is seen again; after that the
stop goes through with a ``systemMessage`` saying why. In the opt-in parked mode
(``FM_CODEX_STOP_MODE=park``, installed by ``fm install codex --parked``: :data:`PARKED`) the
hook parks on the arm and blocks with the wake; the chain starts afresh on a stop that does not
follow a block, and wakes repeating the same reason or exceeding ``FM_CODEX_STOP_LOOP_CEILING``
(100) end it.
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
    DeliveryReceipt,
    GuardProfile,
    HarnessInfo,
    HookEvent,
    HookHarnessPlugin,
    HookInstallSpec,
    HookReply,
    InstallFlag,
    InstallOptions,
    McpServerSpec,
    ParkedStop,
    RearmStrategy,
    Session,
    StopChain,
    TextBlock,
    UserFile,
    WakeDelivery,
    hookimpl,
)

from firstmate_plugin_codex import gate
from firstmate_plugin_codex.gate import EVENTS

NAME = "codex"
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

INFO = HarnessInfo(
    name=NAME,
    display_name="Codex",
    family="protocol",
    rearm_owner="checkpoint",
    wake_channel="bounded fm checkpoint; Stop hook {decision: block} (opt-in: parked Stop)",
    config_files=(".codex/hooks.json", "AGENTS.md"),
    hook_events=EVENTS,
    rearm_event="stop",
    rearm_command=("checkpoint", "--seconds", "180"),
    process_names=("codex",),
    package_markers=(("@openai", "codex"),),
    guard=GuardProfile(style="block", loop_flags=("stop_hook_active",)),
    # A realistic hook call of this harness (its documented hook input), for the contract kit.
    sample_payload={"session_id": "s-1", "turn_id": "t-1", "transcript_path": None, "cwd": "/tmp",
                    "hook_event_name": "{Event}", "model": "gpt",
                    "permission_mode": "default", "stop_hook_active": False,
                    "last_assistant_message": "done"},
    busy_markers=BUSY_MARKERS,
    sample_user_files=SAMPLE_USER_FILES,
    env_aliases=ENV_ALIASES,
    install_flags=(
        InstallFlag("parked", "opt-in parked mode: the Stop hook waits for the next wake and "
                              "hands it over as the continuation (FM_CODEX_STOP_MODE=park, "
                              "timeout 3660 s)"),
        InstallFlag("app-server", "write the protocol of a thread fm codex-serve wakes through "
                                  "codex app-server, instead of the checkpoint protocol "
                                  "(docs/harnesses/codex.md); not with --parked"),
    ),
)

#: The default Stop hook is a guard (it decides and returns); ``--parked`` holds it open.
STOP_TIMEOUT = 60
#: Seconds a parked Stop waits for a wake (``FM_CODEX_PARK_SECONDS``); the installed hook
#: timeout is a minute longer so Codex never kills a park that is about to answer.
PARK_TIMEOUT = 3600
#: A continuation is a block with the text as its reason; a notice is a systemMessage.
REPLY = HookReply.json("reason", notice_key="systemMessage", decision="block")
CHAIN = StopChain.knobs("FM_CODEX_STOP", ceiling=100)
GUARD = CheckpointGuard(reply=REPLY, chain=CHAIN)
PARKED = ParkedStop(reply=REPLY, park_seconds=PARK_TIMEOUT,
                    park_seconds_env="FM_CODEX_PARK_SECONDS", chain=CHAIN)
#: ``fm install codex --parked``: the installed command selects the parked Stop mode.
PARK_ENV = "FM_CODEX_STOP_MODE=park"
BLOCK_NAME = "firstmate-codex"

PROTOCOL = """\
## Firstmate supervision (Codex)

This session supervises a fleet through Firstmate. Codex cannot be woken from outside a turn,
so supervision runs as a bounded foreground checkpoint that you run yourself:

- Between pieces of work, and whenever you would otherwise wait, run
  `fm checkpoint --seconds 180` in the foreground (never in the background).
  - Exit 124 with no reason line: nothing happened. Carry on and run it again later.
  - A reason line (`signal:`, `stale:`, `check:` or `heartbeat`): run `fm wake drain`, handle
    what it shows, then run the exact `fm wake drain --ack-through … --recovery-generation …`
    command it printed.
- A `watcher: FAILED - …` line is an alarm: report it and repair supervision before going on.
- The Stop hook (`fm hook codex stop`) may block the end of a turn while supervision needs you;
  follow its reason. In parked mode it waits for the next wake itself and hands it to you as
  the continuation: handle it the same way (drain, handle, acknowledge). Continuity is
  automatic there: never arm the watcher by hand.
- Never start `fm arm` or `fm watch` yourself, with `&` or as a background task.
"""


APP_SERVER_PROTOCOL = """\
## Firstmate supervision (Codex app-server)

This thread is served by `fm codex-serve`, which runs `codex app-server` and supervises a fleet
through Firstmate. Wakes arrive as new turns that start with `FIRSTMATE_OP:`:

- On such a turn: run `fm wake drain`, handle what it shows, then run the exact
  `fm wake drain --ack-through … --recovery-generation …` command it printed.
- Continuity is automatic: never run `fm arm`, `fm watch` or `fm checkpoint` yourself.
- A `watcher: FAILED - …` line is an alarm: report it and repair supervision before going on.
"""


TRUST_NOTE = "Codex runs a new or changed hook only after you trust it in /hooks."
HOOKS = HookInstallSpec(
    harness=NAME,
    path=".codex/hooks.json",
    # In a git project the project's .codex/hooks.json is the team's: the hook (which names
    # this machine's fm) goes into $CODEX_HOME/hooks.json, keyed to the project.
    user_file=UserFile(".codex", "hooks.json", env="CODEX_HOME"),
    shape=GROUPED,
    events=(HookEvent("Stop", "stop", {"timeout": STOP_TIMEOUT}),),
    blocks=(TextBlock("AGENTS.md", PROTOCOL, BLOCK_NAME),),
    notes=(TRUST_NOTE,),
)
#: ``fm mcp`` as the table ``[mcp_servers.firstmate]`` in the project's ``.codex/config.toml``
#: (kept out of git: it names this machine's fm; the rest of the file kept as written).
MCP = McpServerSpec(
    harness=NAME,
    path=".codex/config.toml",
    key="mcp_servers",
    toml=True,
    notes=("Codex reads .codex/config.toml (and starts the firstmate MCP server) only in a "
           "project you trust: restart Codex and trust it when asked; /mcp lists the server.",),
    by_hand="add it to your own ~/.codex/config.toml instead: codex mcp add firstmate -- {argv}",
)
#: ``--parked``: the Stop hook holds the turn open until the next wake.
PARKED_HOOKS = attrs.evolve(HOOKS, events=(
    HookEvent("Stop", "stop", {"timeout": PARK_TIMEOUT + 60}, env=(PARK_ENV,)),))


def app_server_hooks(options: InstallOptions) -> HookInstallSpec:
    """``--app-server``: the guard hook, and the protocol of a thread served by fm codex-serve."""
    return attrs.evolve(
        HOOKS, blocks=(TextBlock("AGENTS.md", APP_SERVER_PROTOCOL, BLOCK_NAME),),
        standing_notes=(f"Start the served thread with: fm codex-serve --cwd {options.project}",))


@attrs.define(eq=False)
class CodexPlugin(HookHarnessPlugin):
    """The Codex harness plugin."""

    INFO = INFO
    HOOKS = HOOKS
    REARM = GUARD
    MCP = MCP

    def rearm(self, env: Mapping[str, str],
              payload: Mapping[str, Any] | None = None) -> RearmStrategy | None:
        # The installed command of `fm install codex --parked` selects the parked Stop.
        return PARKED if env.get("FM_CODEX_STOP_MODE", "") == "park" else GUARD

    def hook_spec(self, options: InstallOptions) -> HookInstallSpec:
        if options.flag("parked"):
            return PARKED_HOOKS
        return app_server_hooks(options) if options.flag("app-server") else HOOKS

    def check_install(self, options: InstallOptions) -> None:
        if options.flag("parked") and options.flag("app-server"):
            from firstmate.api import UsageError

            raise UsageError("fm install codex takes --parked or --app-server, not both")

    foreign = staticmethod(gate.foreign)

    def crew_launch(self, request: CrewLaunchRequest) -> CrewLaunch:
        from firstmate_plugin_codex import crew

        return crew.launch(request)

    @hookimpl
    def firstmate_deliver_wake(self, wake: WakeDelivery,
                               session: Session) -> DeliveryReceipt | None:
        if session.harness != NAME:
            return None
        from firstmate_plugin_codex import appserver

        served = appserver.deliver(wake.text, session.owner_pid)
        if served is not None:
            return DeliveryReceipt(*served)
        return super().firstmate_deliver_wake(wake=wake, session=session)

    @hookimpl
    def firstmate_cli_commands(self, registry: dict[str, Any]) -> None:
        from firstmate_plugin_codex import appserver

        registry["codex-serve"] = appserver.main


plugin = CodexPlugin()
