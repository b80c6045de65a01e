"""Pi: what the harness is, and (not yet) how its shim is installed.

Pi runs Firstmate in-process: a small TypeScript extension shim talks to ``fm bridge pi``, and
Python owns the policy. It has no command hooks, so it never answers ``firstmate_hook``.
"""

from __future__ import annotations

import attrs
from firstmate import hookimpl
from firstmate.configfiles import install_result, require_project
from firstmate.harness import HarnessInfo, InstallOptions, InstallResult

NAME = "pi"
INFO = HarnessInfo(
    name=NAME,
    display_name="Pi",
    family="in-process",
    rearm_owner="extension",
    wake_channel="pi.sendUserMessage(…, {deliverAs: 'followUp'}) through fm bridge pi",
    config_files=(".pi/extensions/firstmate.ts",),
    hook_events=(),
)

NOT_YET = ("the Pi extension shim install arrives with the bridge (fm bridge pi); "
           "nothing was written")


@attrs.define(eq=False)
class PiPlugin:
    """The Pi harness plugin."""

    @hookimpl
    def firstmate_harness_info(self) -> HarnessInfo:
        return INFO

    @hookimpl
    def firstmate_install(self, options: InstallOptions) -> InstallResult | None:
        if options.harness != NAME:
            return None
        require_project(options)
        return install_result(NAME, [], [NOT_YET], options.dry_run)

    @hookimpl
    def firstmate_uninstall(self, options: InstallOptions) -> InstallResult | None:
        if options.harness != NAME:
            return None
        require_project(options)
        return install_result(NAME, [], [NOT_YET], options.dry_run)


plugin = PiPlugin()
