"""Pi: what the harness is, where its extension shim goes, and how its bridge runs.

Pi runs Firstmate in-process: a small TypeScript extension shim talks to ``fm bridge pi``
(docs/bridge.md), and Python owns the policy. It has no command hooks, so it never answers
``firstmate_hook``. Pi auto-discovers ``.pi/extensions/*/index.ts``, so the install is one
directory, ``.pi/extensions/firstmate/`` (see :mod:`firstmate.plugin.shiminstall`).
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
    ShimSpec,
    crew_extension,
    npm_package_flag,
)

NAME = "pi"
SPEC = ShimSpec(
    harness=NAME,
    package="firstmate_plugin_pi",
    resource="shim/index.ts",
    marker="Firstmate's Pi extension",
    shim=".pi/extensions/firstmate/index.ts",
    support=".pi/extensions/firstmate",
    npm_shim="extensions/firstmate/index.ts",
    npm_fields={"keywords": ["pi-package"], "pi": {"extensions": ["./extensions"]}},
    load_note="Start Pi in this project (or run /reload in a running Pi) to load the extension.",
    npm_note=("Install it with: pi install {package} (add -l for this project only); the "
              "extension starts `fm bridge pi` from Pi's PATH unless FIRSTMATE_BRIDGE_ARGV holds "
              "a JSON argv."),
)
#: The interrupt hint the TUI shows only while a turn runs.
BUSY_MARKERS = ("esc to interrupt",)

INFO = HarnessInfo(
    name=NAME,
    display_name="Pi",
    family="in-process",
    rearm_owner="extension",
    wake_channel="pi.sendUserMessage(…, {deliverAs: 'followUp'}) through fm bridge pi",
    owned_files=SPEC.owned_files(),
    process_names=("pi", "pi-signed"),
    package_markers=(("@mariozechner", "pi-coding-agent"), ("@earendil-works", "pi-coding-agent")),
    guard=GuardProfile(style="follow-up"),
    busy_markers=BUSY_MARKERS,
    install_flags=(npm_package_flag("a Pi package (package.json with pi-package, "
                                                "extensions/firstmate/)"),),
)
PROFILE = BridgeProfile(harness=NAME, delivery="followUp")
#: Where a crew's copy of the crew extension (core's, shared with every harness of this
#: extension API: :func:`firstmate.api.crew_extension`) goes in its launch directory.
CREW_EXTENSION = "pi-crew/index.ts"


def crew_launch(request: CrewLaunchRequest) -> CrewLaunch:
    """``pi -e <crew extension> [ARGS] "<brief>"``: the extension, loaded by this crew's session
    only, records every turn end; Pi submits a prompt given on its command line by itself."""
    extension = CrewFile(CREW_EXTENSION, crew_extension(NAME, request.turn_ended_argv()))
    argv = ("pi", "-e", str(request.file(extension.path)), *request.extra_args, request.brief)
    return CrewLaunch(argv=argv, files=(extension,))


@attrs.define(eq=False)
class PiPlugin(InProcessHarnessPlugin):
    """The Pi harness plugin."""

    INFO = INFO
    SHIM = SPEC
    BRIDGE = PROFILE

    def crew_launch(self, request: CrewLaunchRequest) -> CrewLaunch:
        return crew_launch(request)


plugin = PiPlugin()
