"""omp: what the harness is, and (not yet) how its shim is installed.

omp runs Firstmate in-process: a small JS/TS extension shim talks to ``fm bridge omp``, and
Python owns the policy. It has no command hooks, so it never answers ``firstmate_hook``.
"""

from __future__ import annotations

import attrs
from firstmate import hookimpl
from firstmate.configfiles import install_result, require_project
from firstmate.harness import HarnessInfo, InstallOptions, InstallResult

NAME = "omp"
INFO = HarnessInfo(
    name=NAME,
    display_name="omp",
    family="in-process",
    rearm_owner="extension",
    wake_channel="sendUserMessage through fm bridge omp",
    config_files=(".omp/extensions/firstmate.ts",),
    hook_events=(),
)

NOT_YET = ("the omp extension shim install arrives with the bridge (fm bridge omp); "
           "nothing was written")


@attrs.define(eq=False)
class OmpPlugin:
    """The omp harness plugin."""

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


plugin = OmpPlugin()
