"""Example: what the harness is, how its hooks are installed, and what its stop hook does.

Replace ``example`` / ``Example`` everywhere (this package, pyproject.toml, the tests) with your
harness's name, then change the data to your harness's: its config file and events, its
process names, a realistic hook payload. The base class implements the hookimpls; this module
declares data and the one policy that is the harness's own (:meth:`ExamplePlugin.on_hook`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from firstmate.harness import HarnessInfo, HookOutcome
from firstmate.home import Home
from firstmate.hookinstall import FLAT, HookEvent, HookInstallSpec
from firstmate.pluginbase import HookHarnessPlugin

from firstmate_plugin_example import gate
from firstmate_plugin_example.gate import EVENTS

NAME = "example"
#: ``fm install example`` merges one handler into ``.example/hooks.json``:
#: ``{"hooks": {"stop": [{"command": "fm hook example stop", "timeout": 30}]}}``.
HOOKS = HookInstallSpec(
    harness=NAME,
    path=".example/hooks.json",
    shape=FLAT,
    events=(HookEvent("stop", "stop", {"timeout": 30}),),
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
        # Block the turn end (exit 2) while wakes are queued, so the model drains them first.
        if not home.db.exists():
            return HookOutcome.silent()
        from firstmate import queue
        from firstmate.store import open_store

        store = open_store(home)
        try:
            with store.reading() as conn:
                depth = queue.depth(conn)
        finally:
            store.close()
        if depth == 0:
            return HookOutcome.silent()
        return HookOutcome(2, "", f"FIRSTMATE_OP: {depth} queued wake(s); run fm wake drain\n")


plugin = ExamplePlugin()
