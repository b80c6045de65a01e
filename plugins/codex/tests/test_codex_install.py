"""Codex: the Stop hook and the AGENTS.md protocol block it installs."""

from __future__ import annotations

import json
from pathlib import Path

from firstmate.api import Home, HookOutcome, InstallOptions
from firstmate.testing.state import block_markers
from firstmate_plugin_codex.gate import quick_gate
from firstmate_plugin_codex.hooks import BLOCK_NAME, plugin

STOP = {"session_id": "s", "turn_id": "t", "hook_event_name": "Stop", "stop_hook_active": False}


def test_install_writes_the_stop_hook_and_the_protocol(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("# Agents\n\nMine.\n")
    result = plugin.firstmate_install(options=InstallOptions("codex", tmp_path))
    assert result is not None
    assert json.loads((tmp_path / ".codex" / "hooks.json").read_text()) == {"hooks": {"Stop": [
        {"hooks": [{"type": "command", "command": "fm hook codex stop", "timeout": 60}]}]}}
    agents = (tmp_path / "AGENTS.md").read_text()
    begin, end = block_markers(BLOCK_NAME)
    assert agents.startswith("# Agents\n\nMine.\n\n" + begin)
    assert "fm checkpoint --seconds 180" in agents and agents.endswith(end + "\n")
    plugin.firstmate_uninstall(options=InstallOptions("codex", tmp_path))
    assert (tmp_path / "AGENTS.md").read_text() == "# Agents\n\nMine.\n"
    assert not (tmp_path / ".codex").exists()


def test_gate_and_hook(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    root = str(home.root)
    # Nothing to supervise: the gate and the full hook both let the stop through.
    assert quick_gate("stop", json.dumps(STOP).encode(), {}, root) is False
    assert plugin.firstmate_hook(harness="codex", event="stop", payload=STOP,
                                 home=home, env={}) == HookOutcome.silent()
    (home.crew_dir / "c1.pane").write_text("%1\n")
    assert quick_gate("stop", json.dumps(STOP).encode(), {}, root) is True
    assert quick_gate("stop", json.dumps(STOP).encode(), {"FM_CREW": "c1"}, root) is False
    claude = {"session_id": "s", "hook_event_name": "Stop"}
    assert quick_gate("stop", json.dumps(claude).encode(), {}, root) is False
    assert plugin.firstmate_hook(harness="codex", event="stop", payload=claude, home=home,
                                 env={}) is None
    assert quick_gate("session-start", json.dumps(STOP).encode(), {}, root) is False
