"""Cursor: what the harness is and how it is woken."""

from __future__ import annotations

import attrs

from firstmate import hookimpl
from firstmate.harness import HarnessInfo

INFO = HarnessInfo(
    name="cursor",
    display_name="Cursor",
    family="hook",
    rearm_owner="hook",
    wake_channel="stop hook followup_message (exit 0)",
    config_files=('.cursor/hooks.json',),
    hook_events=('session-start', 'stop'),
)


@attrs.define(eq=False)
class CursorPlugin:
    """The Cursor harness plugin."""

    @hookimpl
    def firstmate_harness_info(self) -> HarnessInfo:
        return INFO
