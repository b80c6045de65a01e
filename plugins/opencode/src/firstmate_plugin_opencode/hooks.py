"""OpenCode: what the harness is, where its plugin shim goes, and how its bridge runs.

OpenCode runs Firstmate in-process: a small JS plugin shim talks to ``fm bridge opencode``
(docs/bridge.md), and Python owns the policy. It has no command hooks, so it never answers
``firstmate_hook``. OpenCode loads every file in ``.opencode/plugins/`` as a plugin, so the shim
is the only file we put there; the bridge client and the launch argv live in
``.opencode/firstmate/`` (see :mod:`firstmate.plugin.shiminstall`).
"""

from __future__ import annotations

import json

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
    npm_package_flag,
    resource_text,
)

NAME = "opencode"
SPEC = ShimSpec(
    harness=NAME,
    package="firstmate_plugin_opencode",
    resource="shim/firstmate.js",
    marker="Firstmate OpenCode shim",
    shim=".opencode/plugins/firstmate.js",
    support=".opencode/firstmate",
    npm_shim="firstmate.js",
    npm_fields={"main": "./firstmate.js",
                "exports": {".": "./firstmate.js", "./server": "./firstmate.js"}},
    load_note=("Restart OpenCode (the TUI or `opencode serve`) to load the plugin; "
               "`opencode run` is not supervised."),
    npm_note=('Add "{package}" to the "plugin" list in opencode.json; the shim starts '
              "`fm bridge opencode` (fm must be on OpenCode's PATH, or set "
              "FIRSTMATE_BRIDGE_ARGV to a JSON argv)."),
)
#: ``fm mcp`` as a local server in the project's ``.opencode/opencode.json`` (beside the shim;
#: kept out of git: it names this machine's fm). OpenCode starts it with no approval step.
MCP = McpServerSpec(
    harness=NAME,
    path=".opencode/opencode.json",
    key="mcp",
    argv_command=True,
    head={"type": "local"},
    tail={"enabled": True},
    notes=("Restart OpenCode to start the firstmate MCP server (opencode mcp list shows it).",),
    by_hand="add it to your own ~/.config/opencode/opencode.json instead: under mcp, the local "
            "server firstmate running {argv}",
)
#: The interrupt hint the TUI shows only while a turn runs.
BUSY_MARKERS = ("esc interrupt",)

INFO = HarnessInfo(
    name=NAME,
    display_name="OpenCode",
    family="in-process",
    rearm_owner="extension",
    wake_channel="client.session.promptAsync through fm bridge opencode",
    owned_files=SPEC.owned_files(),
    process_names=("opencode", ".opencode"),
    package_markers=(("opencode-ai",),),
    guard=GuardProfile(style="follow-up"),
    busy_markers=BUSY_MARKERS,
    install_flags=(npm_package_flag("an npm package (package.json, the plugin shim "
                                                "and its client)"),),
)
PROFILE = BridgeProfile(harness=NAME, delivery="promptAsync")
#: The crew plugin (``crew/firstmate-crew.js`` in this package), and the crew's own config
#: directory in its launch directory: OpenCode reads ``OPENCODE_CONFIG_DIR`` like a project's
#: ``.opencode/`` (its ``plugins/`` load), on top of the user's and the project's config.
CREW_RESOURCE = "crew/firstmate-crew.js"
CREW_CONFIG_DIR = "opencode"
CREW_PLUGIN = f"{CREW_CONFIG_DIR}/plugins/firstmate-crew.js"
CREW_PLACEHOLDER = "__FM_TURN_ENDED_ARGV__"
CREW_NOTES = ("OpenCode installs its plugin SDK into the crew's config directory at its first "
              "start (from the npm registry); the crew's turn ends are recorded either way.",)


def crew_launch(request: CrewLaunchRequest) -> CrewLaunch:
    """``opencode [ARGS] --prompt "<brief>"`` with ``OPENCODE_CONFIG_DIR`` naming the crew's own
    config directory, whose plugin records every turn end (the project's files stay as they
    are; the TUI submits a ``--prompt`` by itself)."""
    source = resource_text(SPEC.package, CREW_RESOURCE, NAME)
    plugin_file = CrewFile(CREW_PLUGIN, source.replace(
        CREW_PLACEHOLDER, json.dumps(request.turn_ended_argv())))
    argv = ("opencode", *request.extra_args, "--prompt", request.brief)
    return CrewLaunch(argv=argv, files=(plugin_file,), notes=CREW_NOTES,
                      env={"OPENCODE_CONFIG_DIR": str(request.file(CREW_CONFIG_DIR))})


@attrs.define(eq=False)
class OpencodePlugin(InProcessHarnessPlugin):
    """The OpenCode harness plugin."""

    INFO = INFO
    SHIM = SPEC
    BRIDGE = PROFILE
    MCP = MCP

    def crew_launch(self, request: CrewLaunchRequest) -> CrewLaunch:
        return crew_launch(request)


plugin = OpencodePlugin()
