"""Cursor: the hooks file it installs, and which hook calls are its own."""

from __future__ import annotations

import json
from pathlib import Path

from firstmate.api import Home, HookOutcome, InstallOptions
from firstmate_plugin_cursor.gate import quick_gate
from firstmate_plugin_cursor.hooks import plugin

STOP = {"conversation_id": "c", "generation_id": "g", "hook_event_name": "stop",
        "cursor_version": "2.0.0", "status": "completed", "loop_count": 0}


def test_install_writes_a_versioned_hooks_file_with_an_uncapped_stop(tmp_path: Path) -> None:
    result = plugin.firstmate_install(options=InstallOptions("cursor", tmp_path))
    assert result is not None and result.written[0] == tmp_path / ".cursor" / "hooks.json"
    # (and .cursor/mcp.json when this fm has the MCP SDK: test_cursor_mcp.py)
    assert set(result.written[1:]) <= {tmp_path / ".cursor" / "mcp.json"}
    assert json.loads((tmp_path / ".cursor" / "hooks.json").read_text()) == {
        "version": 1,
        "hooks": {
            "sessionStart": [{"command": "fm hook cursor session-start", "timeout": 30}],
            "stop": [{"command": "fm hook cursor stop", "loop_limit": None, "timeout": 28800}],
        },
    }
    plugin.firstmate_uninstall(options=InstallOptions("cursor", tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_hooks_file_without_version_gets_one_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / ".cursor" / "hooks.json"
    path.parent.mkdir()
    path.write_text('{"hooks": {"stop": [{"command": "./mine.sh"}]}}')
    result = plugin.firstmate_install(options=InstallOptions("cursor", tmp_path))
    assert result is not None and any('"version": 1' in note for note in result.notes)
    doc = json.loads(path.read_text())
    assert doc["version"] == 1 and doc["hooks"]["stop"][0] == {"command": "./mine.sh"}


def test_gate_and_hook_agree(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    data = json.dumps(STOP).encode()
    assert quick_gate("stop", data, {}, str(home.root)) is False
    home.ensure()
    root = str(home.root)
    assert quick_gate("session-start", data, {}, root) is True
    assert plugin.firstmate_hook(harness="cursor", event="session-start", payload=STOP,
                                 home=home, env={}) == HookOutcome.silent()
    # No supervision need: the gate lets the stop through before anything loads, as the
    # full hook would (with Cursor's empty answer).
    assert quick_gate("stop", data, {}, root) is False
    assert plugin.firstmate_hook(harness="cursor", event="stop", payload=STOP, home=home,
                                 env={}) == HookOutcome(0, "{}\n")
    (home.crew_dir / "c1.pane").write_text("%1\n")
    assert quick_gate("stop", data, {}, root) is True
    assert quick_gate("stop", data, {"FM_CREW": "c1"}, root) is False  # a crew's own session
    assert quick_gate("stop-failure", data, {}, root) is False


def test_foreign_callers_of_cursors_hooks_get_no_answer(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    root = str(home.root)
    claude = {"session_id": "s", "hook_event_name": "Stop"}
    grok = {"hookEventName": "Stop", "cursor_version": "x"}
    for payload in (claude, grok):
        assert quick_gate("stop", json.dumps(payload).encode(), {}, root) is False
        assert plugin.firstmate_hook(harness="cursor", event="stop", payload=payload, home=home,
                                     env={}) is None
    pi_host = {"PI_CODING_AGENT": "true"}
    assert quick_gate("stop", json.dumps(STOP).encode(), pi_host, root) is False
    assert plugin.firstmate_hook(harness="cursor", event="stop", payload=STOP, home=home,
                                 env=pi_host) is None
    # Pi with Cursor's own agent running is Cursor.
    both = {"PI_CODING_AGENT": "true", "CURSOR_AGENT": "1"}
    assert plugin.firstmate_hook(harness="cursor", event="stop", payload=STOP, home=home,
                                 env=both) is not None
    assert plugin.firstmate_hook(harness="cursor", event="stop", payload=STOP,
                                 home=home, env={"GROK_HOOK_EVENT": "Stop"}) is None
