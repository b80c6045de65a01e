"""Codex: what the harness is and how it is woken."""

from __future__ import annotations

import attrs

from firstmate import hookimpl
from firstmate.harness import HarnessInfo

INFO = HarnessInfo(
    name="codex",
    display_name="Codex",
    family="protocol",
    rearm_owner="checkpoint",
    wake_channel="bounded fm checkpoint; Stop hook {decision: block}",
    config_files=('.codex/hooks.json', 'AGENTS.md'),
    hook_events=('stop',),
)


@attrs.define(eq=False)
class CodexPlugin:
    """The Codex harness plugin."""

    @hookimpl
    def firstmate_harness_info(self) -> HarnessInfo:
        return INFO
