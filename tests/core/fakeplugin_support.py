"""Fake harness plugins for the core's tests: no real plugin is installed in the core's CI env,
so a test writes one into a private site directory, found by this process and by every ``fm``
child it starts, exactly as an installed distribution is (a module and its
``firstmate.plugins`` entry point)."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

#: A hook harness declaring one re-arm strategy: ``{name}``, ``{strategy}`` (an expression over
#: the firstmate.api names imported here) and ``{guard}`` are filled in.
HOOK_PLUGIN = '''
"""A fake hook harness for the core's tests."""

import attrs
from firstmate.api import (
    FLAT,
    CheckpointGuard,
    ClaimLedgerPark,
    GuardProfile,
    HarnessInfo,
    HookEvent,
    HookInstallSpec,
    HookReply,
    ParkedStop,
    StopChain,
)
from firstmate.plugin.pluginbase import HookHarnessPlugin

NAME = {name!r}
REARM = {strategy}
OWNER = {owner!r}
INFO = HarnessInfo(
    name=NAME, display_name="Fake " + NAME, family="hook" if OWNER == "hook" else "protocol",
    rearm_owner=OWNER, wake_channel="a test's stop hook", config_files=(".fake/hooks.json",),
    hook_events=("stop", *getattr(REARM, "paced_events", ())),
    rearm_event="stop", rearm_command={rearm_command!r}, process_names=(NAME,),
    guard={guard}, project_env=("FAKE_PROJECT_DIR",),
    sample_payload={{"fake_session": "f-1", "event": "{{Event}}"}},
)


@attrs.define(eq=False)
class FakePlugin(HookHarnessPlugin):
    INFO = INFO
    HOOKS = HookInstallSpec(harness=NAME, path=".fake/hooks.json", shape=FLAT,
                            events=tuple(HookEvent(e, e, {{}}) for e in INFO.hook_events),
                            skeleton={{"hooks": {{}}}})
    REARM = REARM

    def foreign(self, payload, env):
        return payload is not None and "fake_session" not in payload


plugin = FakePlugin()
'''


@attrs.define
class FakeSite:
    """A private site directory on this process's path and its children's ``PYTHONPATH``."""

    path: Path
    monkeypatch: pytest.MonkeyPatch

    def add(self, name: str, source: str) -> None:
        """Install the plugin *source* for harness *name* (a module and its entry point)."""
        module = f"fake_harness_{name.replace('-', '_')}"
        (self.path / f"{module}.py").write_text(textwrap.dedent(source))
        info = self.path / f"{module}-0.1.0.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1.0\n")
        (info / "entry_points.txt").write_text(f"[firstmate.plugins]\n{name} = {module}:plugin\n")
        for stale in [m for m in sys.modules if m.endswith(name.replace("-", "_"))]:
            self.monkeypatch.delitem(sys.modules, stale)

    def hook_plugin(self, name: str, strategy: str, *, guard: str = "REARM.guard "
                    "if hasattr(REARM, 'guard') else GuardProfile()", owner: str = "hook",
                    rearm_command: tuple[str, ...] = ()) -> None:
        """A fake hook harness *name* whose re-arm strategy is the expression *strategy*."""
        self.add(name, HOOK_PLUGIN.format(name=name, strategy=strategy, guard=guard, owner=owner,
                                          rearm_command=rearm_command))

    @property
    def pythonpath(self) -> str:
        return os.pathsep.join([str(self.path),
                                *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])


@pytest.fixture
def fake_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSite]:
    """A site directory for fake plugins, seen by this process and by its ``fm`` children."""
    from firstmate.plugin import harnessprocs, manager

    site = FakeSite(tmp_path / "fake-site", monkeypatch)
    site.path.mkdir()
    monkeypatch.syspath_prepend(str(site.path))
    monkeypatch.setenv("PYTHONPATH", site.pythonpath)
    # Hosts and process tables are built once per process: build them anew with the fakes.
    monkeypatch.setattr(manager, "_HARNESS_HOSTS", {})
    monkeypatch.setattr(harnessprocs, "_TABLES", {})
    yield site
