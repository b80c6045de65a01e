"""Example: what the harness is, how its hooks are installed, and how it keeps the watch.

Replace ``example`` / ``Example`` everywhere (this package, pyproject.toml, the tests) with your
harness's name, then change the data to your harness's: its config file and events, its
process names, a realistic hook payload. Everything here is declared: the base class implements
the hooks, and the re-arm strategy (:data:`REARM`, a parked stop hook) is run by core: the stop
hook *parks* on the watcher (arms one or attaches to the live one), and answers with the wake
only once the continuity engine has a confirmed successor watching; the next turn end parks on
that successor, so the fleet stays watched with no help from the model.
"""

from __future__ import annotations

import attrs
from firstmate.api import (
    FLAT,
    HarnessInfo,
    HookEvent,
    HookHarnessPlugin,
    HookInstallSpec,
    HookReply,
    ParkedStop,
)

from firstmate_plugin_example import gate
from firstmate_plugin_example.gate import EVENTS

NAME = "example"
#: Seconds one park waits for a wake; below the hook timeout the install writes.
PARK_SECONDS = 28000
#: The stop hook parks on the watcher and answers with exit 2, the wake on stderr, which
#: Example reads as the next user message.
REARM = ParkedStop(reply=HookReply(exit_code=2), park_seconds=PARK_SECONDS)
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
    REARM = REARM

    # Harnesses load each other's config files: a call that is not Example's is answered None.
    foreign = staticmethod(gate.foreign)


plugin = ExamplePlugin()
