"""omp: what the harness is, where its extension shim goes, and how its bridge runs.

omp (oh-my-pi, a Pi fork on Bun) runs Firstmate in-process: a small TypeScript extension shim
talks to ``fm bridge omp`` (docs/bridge.md), and Python owns the policy. It has no command hooks,
so it never answers ``firstmate_hook``. omp auto-discovers ``<cwd>/.omp/extensions/*/index.ts``,
so the install is one directory, ``.omp/extensions/firstmate/`` (see
:mod:`firstmate.plugin.shiminstall`).
"""

from __future__ import annotations

import attrs
from firstmate.api import (
    BridgeProfile,
    CrewFile,
    CrewLaunch,
    CrewLaunchRequest,
    GuardProfile,
    HarnessInfo,
    InProcessHarnessPlugin,
    McpServerSpec,
    ShimSpec,
    crew_extension,
    npm_package_flag,
)

NAME = "omp"
SPEC = ShimSpec(
    harness=NAME,
    package="firstmate_plugin_omp",
    resource="shim/index.ts",
    marker="Firstmate's omp extension",
    shim=".omp/extensions/firstmate/index.ts",
    support=".omp/extensions/firstmate",
    npm_shim="extensions/firstmate/index.ts",
    npm_fields={"keywords": ["omp", "omp-plugin"], "omp": {"extensions": ["./extensions"]}},
    load_note="Start omp in this project (a running omp loads the extension at its next start).",
    npm_note=("Install {package} as an omp plugin (its package.json names the extension under "
              "\"omp\"); the extension starts `fm bridge omp` from omp's PATH unless "
              "FIRSTMATE_BRIDGE_ARGV holds a JSON argv."),
)
#: ``fm mcp`` in the project's ``.omp/mcp.json`` (beside the extension; kept out of git: it
#: names this machine's fm). omp starts a stdio server when ``type`` is left out.
MCP = McpServerSpec(
    harness=NAME,
    path=".omp/mcp.json",
    key="mcpServers",
    notes=("Start omp in this project to start the firstmate MCP server (/mcp list shows it).",),
    by_hand="add it to your own ~/.omp/agent/mcp.json instead: under mcpServers, firstmate "
            "with the command and args of {argv}",
)
#: The interrupt hint the TUI shows only while a turn runs.
BUSY_MARKERS = ("esc to interrupt",)

INFO = HarnessInfo(
    name=NAME,
    display_name="omp",
    family="in-process",
    rearm_owner="extension",
    wake_channel="pi.sendUserMessage(…) with no deliverAs, through fm bridge omp",
    owned_files=SPEC.owned_files(),
    process_names=("omp",),
    package_markers=(("@oh-my-pi", "pi-coding-agent"),),
    guard=GuardProfile(style="block"),
    busy_markers=BUSY_MARKERS,
    install_flags=(npm_package_flag("an omp plugin package (package.json naming the "
                                                "extension under omp.extensions)"),),
)
# omp reports no shutdown reason, so its arm is retired at every shutdown, and a session left
# idle with owed rows is woken by the bridge's idle queue read (docs/bridge.md).
PROFILE = BridgeProfile(harness=NAME, delivery="prompt", retire_on_shutdown=True,
                        idle_queue_read=True,
                        idle_queue_tick_env="FM_OMP_QUEUE_TICK_MS")
#: Where a crew's copy of the crew extension (core's, shared with every harness of this
#: extension API: :func:`firstmate.api.crew_extension`) goes in its launch directory.
CREW_EXTENSION = "omp-crew/index.ts"
CREW_NOTE = ("omp opens its setup wizard at its first interactive start unless "
             "~/.omp/agent/config.yml says startup: {{setupWizard: false}}: finish it in the "
             "crew's window once (fm crew attach {crew}).")


def crew_launch(request: CrewLaunchRequest) -> CrewLaunch:
    """``omp -e <crew extension> [ARGS] "<brief>"``: the extension, loaded by this crew's
    session only, records every turn end; omp submits a prompt given on its command line."""
    extension = CrewFile(CREW_EXTENSION, crew_extension(NAME, request.turn_ended_argv()))
    argv = ("omp", "-e", str(request.file(extension.path)), *request.extra_args, request.brief)
    return CrewLaunch(argv=argv, files=(extension,), notes=(CREW_NOTE.format(crew=request.crew),))


@attrs.define(eq=False)
class OmpPlugin(InProcessHarnessPlugin):
    """The omp harness plugin."""

    INFO = INFO
    SHIM = SPEC
    BRIDGE = PROFILE
    MCP = MCP

    def crew_launch(self, request: CrewLaunchRequest) -> CrewLaunch:
        return crew_launch(request)


plugin = OmpPlugin()
