"""Example: what the harness is, how its hooks are installed, and what its stop hook does.

Replace ``example`` / ``Example`` everywhere (this package, pyproject.toml, the tests) with your
harness's name, then change the data to your harness's: its config file and events, its
process names, a realistic hook payload. The base class implements the hookimpls; this module
declares data and the one policy that is the harness's own (:meth:`ExamplePlugin.on_hook`):
its stop hook *parks* on the watcher (arms one or attaches to the live one), and returns the
wake only once the continuity engine has a confirmed successor watching — the next turn end parks
on that successor, so the fleet stays watched with no help from the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from firstmate.plugin.harness import HarnessInfo, HookOutcome
from firstmate.plugin.hookinstall import FLAT, HookEvent, HookInstallSpec
from firstmate.plugin.pluginbase import HookHarnessPlugin
from firstmate.store.home import Home

from firstmate_plugin_example import gate
from firstmate_plugin_example.gate import EVENTS

NAME = "example"
#: Seconds one park waits for a wake; below the hook timeout the install writes.
PARK_SECONDS = 28000
#: Turn-end guard verdicts that mean "nothing here for this session to watch".
STAND_ASIDE = ("no-payload", "out-of-scope", "no-need", "read-only", "away-owner")
#: ``fm install example`` merges one handler into ``.example/hooks.json``:
#: ``{"hooks": {"stop": [{"command": "fm hook example stop", "timeout": 28600}]}}``.
HOOKS = HookInstallSpec(
    harness=NAME,
    path=".example/hooks.json",
    shape=FLAT,
    events=(HookEvent("stop", "stop", {"timeout": PARK_SECONDS + 600}),),
    skeleton={"hooks": {}},
    notes=("Restart Example to load the hook.",),
)
INFO = HarnessInfo(
    name=NAME,
    display_name="Example",
    family="hook",
    rearm_owner="hook",
    wake_channel="stop hook exit 2 with the wake on stderr",
    config_files=HOOKS.config_files(),
    hook_events=EVENTS,
    rearm_event="stop",
    process_names=("example",),
    package_markers=(("@example", "agent"),),
    # A realistic hook call of this harness, for the contract kit (``{Event}`` → ``Stop``).
    sample_payload={"example_session": "e-1", "event": "{Event}"},
)


@attrs.define(eq=False)
class ExamplePlugin(HookHarnessPlugin):
    """The Example harness plugin."""

    INFO = INFO
    HOOKS = HOOKS

    # Harnesses load each other's config files: a call that is not Example's is answered None.
    foreign = staticmethod(gate.foreign)

    def on_hook(self, event: str, payload: Mapping[str, Any] | None, home: Home,
                env: Mapping[str, str]) -> HookOutcome | None:
        """Park on the watcher and return its wake (or its failure) as the next user message."""
        if not isinstance(payload, Mapping) or not home.state.is_dir():
            return HookOutcome.silent()
        from firstmate.continuity.park import park
        from firstmate.guards.turnend import turnend_decision

        if turnend_decision(NAME, payload, home=home, env=env).why in STAND_ASIDE:
            return HookOutcome.silent()
        result = park(home, NAME, env, seconds=PARK_SECONDS, display_name="Example")
        if result.outcome in ("wake", "failed", "refused"):
            return HookOutcome(2, "", result.text.rstrip("\n") + "\n")
        return HookOutcome.silent()  # superseded by a newer park, or the park timed out


plugin = ExamplePlugin()
