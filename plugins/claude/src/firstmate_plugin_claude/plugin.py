"""Claude Code: what the harness is and how it is woken."""

from __future__ import annotations

import attrs

from firstmate import hookimpl
from firstmate.harness import HarnessInfo

INFO = HarnessInfo(
    name="claude",
    display_name="Claude Code",
    family="hook",
    rearm_owner="hook",
    wake_channel="Stop/StopFailure asyncRewake hook: exit 2 with the wake on stderr",
    config_files=('.claude/settings.json',),
    hook_events=('session-start', 'stop', 'stop-failure'),
)


@attrs.define(eq=False)
class ClaudePlugin:
    """The Claude Code harness plugin."""

    @hookimpl
    def firstmate_harness_info(self) -> HarnessInfo:
        return INFO
