"""OpenCode: what the harness is, and (not yet) how its shim is installed.

OpenCode runs Firstmate in-process: a small JS/TS plugin shim talks to ``fm bridge opencode``, and
Python owns the policy. It has no command hooks, so it never answers ``firstmate_hook``.
"""

from __future__ import annotations

import attrs
from firstmate import hookimpl
from firstmate.configfiles import install_result, require_project
from firstmate.harness import HarnessInfo, InstallOptions, InstallResult

NAME = "opencode"
INFO = HarnessInfo(
    name=NAME,
    display_name="OpenCode",
    family="in-process",
    rearm_owner="extension",
    wake_channel="client.session.promptAsync through fm bridge opencode",
    config_files=(".opencode/plugins/firstmate.js",),
    hook_events=(),
)

NOT_YET = ("the OpenCode plugin shim install arrives with the bridge (fm bridge opencode); "
           "nothing was written")


@attrs.define(eq=False)
class OpencodePlugin:
    """The OpenCode harness plugin."""

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


plugin = OpencodePlugin()
