"""omp: what the harness is and how it is woken."""

from __future__ import annotations

import attrs

from firstmate import hookimpl
from firstmate.harness import HarnessInfo

INFO = HarnessInfo(
    name="omp",
    display_name="omp",
    family="in-process",
    rearm_owner="extension",
    wake_channel="sendUserMessage through fm bridge omp",
    config_files=('.omp/extensions/firstmate.ts',),
    hook_events=(),
)


@attrs.define(eq=False)
class OmpPlugin:
    """The omp harness plugin."""

    @hookimpl
    def firstmate_harness_info(self) -> HarnessInfo:
        return INFO
