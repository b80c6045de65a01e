"""OpenCode: what the harness is and how it is woken."""

from __future__ import annotations

import attrs

from firstmate import hookimpl
from firstmate.harness import HarnessInfo

INFO = HarnessInfo(
    name="opencode",
    display_name="OpenCode",
    family="in-process",
    rearm_owner="extension",
    wake_channel="client.session.promptAsync through fm bridge opencode",
    config_files=('.opencode/plugins/firstmate.js',),
    hook_events=(),
)


@attrs.define(eq=False)
class OpencodePlugin:
    """The OpenCode harness plugin."""

    @hookimpl
    def firstmate_harness_info(self) -> HarnessInfo:
        return INFO
