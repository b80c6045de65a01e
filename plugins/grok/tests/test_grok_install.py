"""Grok: the Stop hook file and the rules it installs."""

from __future__ import annotations

import json
from pathlib import Path

from firstmate.api import Home, HookOutcome, InstallOptions
from firstmate_plugin_grok.gate import quick_gate
from firstmate_plugin_grok.hooks import plugin

STOP = {"hookEventName": "Stop", "sessionId": "s", "cwd": "/", "workspaceRoot": "/"}


def test_install_writes_hook_and_rules_and_uninstall_removes_them(tmp_path: Path) -> None:
    result = plugin.firstmate_install(options=InstallOptions("grok", tmp_path))
    assert result is not None and len(result.written[:2]) == 2
    # (and .grok/config.toml when this fm has the MCP SDK: test_grok_mcp.py)
    assert set(result.written[2:]) <= {tmp_path / ".grok" / "config.toml"}
    assert json.loads((tmp_path / ".grok" / "hooks" / "firstmate.json").read_text()) == {
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "fm hook grok stop",
                                       "timeout": 30}]}]}}
    rules = (tmp_path / ".grok" / "rules" / "firstmate.md").read_text()
    assert "fm arm" in rules and "fm wake drain" in rules
    plugin.firstmate_uninstall(options=InstallOptions("grok", tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_gate_and_hook(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    root = str(home.root)
    data = json.dumps(STOP).encode()
    # Nothing to supervise: the gate and the full hook both let the stop through.
    assert quick_gate("stop", data, {"GROK_HOOK_EVENT": "Stop"}, root) is False
    assert plugin.firstmate_hook(harness="grok", event="stop", payload=STOP, home=home,
                                 env={"GROK_HOOK_EVENT": "Stop"}) == HookOutcome.silent()
    (home.crew_dir / "c1.pane").write_text("%1\n")
    assert quick_gate("stop", data, {"GROK_HOOK_EVENT": "Stop"}, root) is True
    assert quick_gate("stop", data, {"GROK_HOOK_EVENT": "Stop", "FM_CREW": "c1"}, root) is False
    claude = {"session_id": "s", "hook_event_name": "Stop"}
    assert quick_gate("stop", json.dumps(claude).encode(), {}, root) is False
    assert plugin.firstmate_hook(harness="grok", event="stop", payload=claude, home=home,
                                 env={}) is None
    # Grok's environment marks its own hook calls even when stdin came through empty.
    assert plugin.firstmate_hook(harness="grok", event="stop", payload=None, home=home,
                                 env={"GROK_HOOK_EVENT": "Stop"}) == HookOutcome.silent()
