"""Pi: what the harness is and how it is woken."""

from __future__ import annotations

import attrs

from firstmate import hookimpl
from firstmate.harness import HarnessInfo

INFO = HarnessInfo(
    name="pi",
    display_name="Pi",
    family="in-process",
    rearm_owner="extension",
    wake_channel="pi.sendUserMessage(…, {deliverAs: 'followUp'}) through fm bridge pi",
    config_files=('.pi/extensions/firstmate.ts',),
    hook_events=(),
)


@attrs.define(eq=False)
class PiPlugin:
    """The Pi harness plugin."""

    @hookimpl
    def firstmate_harness_info(self) -> HarnessInfo:
        return INFO
