"""The Example plugin passes the harness contract, and its own policy holds.

Skipped unless the plugin is installed (``pip install -e plugins/_template``), so the
repository's own test runs pass over the template.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("firstmate_plugin_example", reason="the template plugin is not installed")

from firstmate.api import Home, HookOutcome, InstallOptions
from firstmate.testing import HarnessContract, fm_env, fm_home  # noqa: F401
from firstmate_plugin_example.gate import quick_gate
from firstmate_plugin_example.hooks import plugin


@pytest.fixture
def harness() -> str:
    return "example"


class TestExampleContract(HarnessContract):
    pass


def test_install_writes_the_stop_handler(tmp_path: Path) -> None:
    plugin.firstmate_install(options=InstallOptions("example", tmp_path))
    assert json.loads((tmp_path / ".example" / "hooks.json").read_text()) == {
        "hooks": {"stop": [{"command": "fm hook example stop", "timeout": 28600}]}}


def test_gate_and_hook_agree(fm_home: Home) -> None:  # noqa: F811
    ours = {"example_session": "e-1", "event": "Stop"}
    assert quick_gate("stop", json.dumps(ours).encode(), {}, str(fm_home.root)) is True
    assert plugin.firstmate_hook(harness="example", event="stop", payload=ours, home=fm_home,
                                 env={}) == HookOutcome.silent()
    other = {"session_id": "s-1", "hook_event_name": "Stop"}
    assert quick_gate("stop", json.dumps(other).encode(), {}, str(fm_home.root)) is False
    assert plugin.firstmate_hook(harness="example", event="stop", payload=other, home=fm_home,
                                 env={}) is None
