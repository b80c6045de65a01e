"""Grok: what the harness is and how it is woken."""

from __future__ import annotations

import attrs

from firstmate import hookimpl
from firstmate.harness import HarnessInfo

INFO = HarnessInfo(
    name="grok",
    display_name="Grok",
    family="protocol",
    rearm_owner="model-task",
    wake_channel="tracked background task running fm arm; Stop hook block",
    config_files=('.grok/hooks/firstmate.json',),
    hook_events=('stop',),
)


@attrs.define(eq=False)
class GrokPlugin:
    """The Grok harness plugin."""

    @hookimpl
    def firstmate_harness_info(self) -> HarnessInfo:
        return INFO
