"""Claude Code: the settings it installs, and which hook calls are its own."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from firstmate.api import Home, HookOutcome, InstallOptions
from firstmate_plugin_claude.gate import quick_gate
from firstmate_plugin_claude.hooks import plugin

STOP = json.dumps({"session_id": "s", "transcript_path": "/t", "cwd": "/", "hook_event_name": "Stop",
                   "stop_hook_active": True, "last_assistant_message": "ok"}).encode()


def _settings(project: Path, name: str = "settings.local.json") -> dict[str, object]:
    value: dict[str, object] = json.loads((project / ".claude" / name).read_text())
    return value


def test_install_registers_stop_stopfailure_async_and_session_start(tmp_path: Path) -> None:
    result = plugin.firstmate_install(options=InstallOptions("claude", tmp_path))
    # Claude Code's personal settings: the hooks name this machine's fm, never committed.
    assert result is not None and result.written[0] == tmp_path / ".claude" / "settings.local.json"
    # (and .mcp.json when this fm has the MCP SDK: test_claude_mcp.py)
    assert set(result.written[1:]) <= {tmp_path / ".mcp.json"}
    assert not (tmp_path / ".claude" / "settings.json").exists()
    settings = _settings(tmp_path)
    # The server registered in .mcp.json is approved beside the hooks (only then).
    assert settings.pop("enabledMcpjsonServers", None) == (["firstmate"] if result.mcp else None)
    assert settings == {"hooks": {
        "SessionStart": [{"hooks": [{"type": "command", "command": "fm hook claude session-start",
                                     "timeout": 30}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "fm hook claude stop",
                             "asyncRewake": True, "timeout": 28800}]}],
        "StopFailure": [{"hooks": [{"type": "command", "command": "fm hook claude stop-failure",
                                    "asyncRewake": True, "timeout": 28800}]}],
    }}


def test_local_flag_home_and_command_are_honoured(tmp_path: Path) -> None:
    opts = InstallOptions("claude", tmp_path, home=tmp_path / "h", fm_command="/venv/bin/fm",
                          flags={"local": "true"})
    plugin.firstmate_install(options=opts)
    assert not (tmp_path / ".claude" / "settings.json").exists()
    stop = _settings(tmp_path, "settings.local.json")["hooks"]["Stop"]  # type: ignore[index]
    assert stop[0]["hooks"][0]["command"] == f"/venv/bin/fm hook claude stop --home {tmp_path / 'h'}"
    plugin.firstmate_uninstall(options=opts)
    assert not (tmp_path / ".claude").exists()


def test_not_my_harness(tmp_path: Path) -> None:
    assert plugin.firstmate_install(options=InstallOptions("cursor", tmp_path)) is None
    assert plugin.firstmate_uninstall(options=InstallOptions("cursor", tmp_path)) is None
    assert list(tmp_path.iterdir()) == []


def test_gate_and_hook_agree(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    root = str(home.root)
    assert quick_gate("stop", STOP, {}, root) is False  # never set up: nothing is supervised
    home.ensure()
    # Set up, nothing registered: only the session start has work; a turn end has nothing
    # to keep watched, and the full hook agrees.
    assert quick_gate("session-start", STOP, {}, root) is True
    for event in ("stop", "stop-failure"):
        assert quick_gate(event, STOP, {}, root) is False
        assert plugin.firstmate_hook(harness="claude", event=event, payload=json.loads(STOP),
                                     home=home, env={}) == HookOutcome.silent()
    (home.crew_dir / "c1.pane").write_text("%1\n")
    for event in ("session-start", "stop", "stop-failure"):
        assert quick_gate(event, STOP, {}, root) is True
        # A crew's own session: every hook stands down silently, the gate first.
        assert quick_gate(event, STOP, {"FM_CREW": "c"}, root) is False
        assert plugin.firstmate_hook(harness="claude", event=event, payload=json.loads(STOP),
                                     home=home, env={"FM_CREW": "c"}) == HookOutcome.silent()
    # Async hooks sometimes get no stdin: that is not a reason to stand down.
    assert quick_gate("stop", b"", {}, root) is True
    assert quick_gate("bogus", STOP, {}, root) is False
    assert plugin.firstmate_hook(harness="claude", event="bogus", payload={}, home=home,
                                 env={}) is None


def test_other_harnesses_loading_claude_settings_get_no_answer(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    (home.crew_dir / "c1.pane").write_text("%1\n")  # something to supervise
    root = str(home.root)
    cursor = {"conversation_id": "c", "hook_event_name": "stop", "cursor_version": "2.0"}
    codex = {"session_id": "s", "turn_id": "t", "hook_event_name": "Stop"}
    grok = {"hookEventName": "Stop", "sessionId": "s"}
    for payload in (cursor, codex, grok):
        assert quick_gate("stop", json.dumps(payload).encode(), {}, root) is False
        assert plugin.firstmate_hook(harness="claude", event="stop", payload=payload, home=home,
                                     env={}) is None
    for env in ({"GROK_AGENT": "1"}, {"GROK_HOOK_EVENT": "Stop"}):
        assert quick_gate("stop", STOP, env, root) is False
        assert plugin.firstmate_hook(harness="claude", event="stop", payload=json.loads(STOP),
                                     home=home, env=env) is None
    # GROK_SESSION_ID leaks into children of Grok: alone it proves nothing.
    assert quick_gate("stop", STOP, {"GROK_SESSION_ID": "x"}, root) is True
    # The foreign key's name inside a text value is not a foreign payload.
    quoted = json.dumps({"hook_event_name": "Stop", "last_assistant_message": 'set "cursor_version"'})
    assert quick_gate("stop", quoted.encode(), {}, root) is True


def test_away_stands_down_turn_end_hooks_only(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    home.away_record.write_text("away\n")
    root = str(home.root)
    assert quick_gate("stop", STOP, {}, root) is False
    assert quick_gate("stop-failure", STOP, {}, root) is False
    assert quick_gate("session-start", STOP, {}, root) is True


def _fm(tmp_path: Path, *args: str) -> str:
    import sys

    done = subprocess.run([sys.executable, "-m", "firstmate", *args, "--project",
                           str(tmp_path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "FM_HOME": str(tmp_path / "home")}, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_fm_install_is_idempotent_and_keeps_the_users_entries(tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.local.json"
    settings.parent.mkdir()
    mine = {"permissions": {"allow": ["Bash(ls:*)"]},
            "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
                      "PreToolUse": [{"matcher": "Bash",
                                      "hooks": [{"type": "command", "command": "audit.sh"}]}]}}
    settings.write_text(json.dumps(mine, indent=2) + "\n")
    original = settings.read_bytes()

    _fm(tmp_path, "install", "claude")
    once = settings.read_bytes()
    assert "unchanged" in _fm(tmp_path, "install", "claude") and settings.read_bytes() == once
    doc = json.loads(once)
    assert doc["permissions"] == mine["permissions"]
    assert doc["hooks"]["PreToolUse"] == mine["hooks"]["PreToolUse"]
    stop_commands = [h["command"] for g in doc["hooks"]["Stop"] for h in g["hooks"]]
    assert stop_commands[0] == "notify-send done" and len(stop_commands) == 2
    assert stop_commands[1].endswith("fm hook claude stop")  # ours, by absolute path
    _fm(tmp_path, "uninstall", "claude")
    assert settings.read_bytes() == original
    assert sorted(p.name for p in settings.parent.iterdir()) == ["settings.local.json"]


def test_what_the_user_added_between_two_installs_survives_the_uninstall(
        tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.local.json"
    settings.parent.mkdir()
    settings.write_text('{\n  "permissions": {"allow": ["Bash(ls:*)"]}\n}\n')
    _fm(tmp_path, "install", "claude")
    # The user adds a hook and a key of their own; fm has moved since (its hooks name an older
    # path), so the next install rewrites the file with their additions in it.
    doc = json.loads(settings.read_text())
    for groups in doc["hooks"].values():
        for group in groups:
            for hook in group["hooks"]:
                hook["command"] = "/old/venv/bin/fm hook claude " + \
                    hook["command"].rsplit(" hook claude ", 1)[1]
    doc["hooks"]["PreToolUse"] = [{"matcher": "Bash",
                                   "hooks": [{"type": "command", "command": "audit.sh"}]}]
    doc["model"] = "opus"
    settings.write_text(json.dumps(doc, indent=2) + "\n")
    assert "merged .claude/settings.local.json" in _fm(tmp_path, "install", "claude")
    _fm(tmp_path, "uninstall", "claude")
    assert json.loads(settings.read_text()) == {
        "permissions": {"allow": ["Bash(ls:*)"]}, "model": "opus",
        "hooks": {"PreToolUse": doc["hooks"]["PreToolUse"]}}


def test_hooks_an_older_fm_put_in_the_committed_settings_are_moved(tmp_path: Path) -> None:
    """An older fm wrote the hooks (with this machine's paths) into .claude/settings.json and
    kept a .fm-backup beside it: the next install puts that file back as the user had it and
    moves the hooks into the personal settings."""
    shared = tmp_path / ".claude" / "settings.json"
    shared.parent.mkdir()
    theirs = b'{\n    "model": "opus"\n}\n'
    shared.with_name("settings.json.fm-backup").write_bytes(theirs)
    older = {"model": "opus", "hooks": {"Stop": [{"hooks": [
        {"type": "command", "command": "/old/venv/bin/fm hook claude stop",
         "asyncRewake": True, "timeout": 28800}]}]}}
    shared.write_text(json.dumps(older, indent=4) + "\n")
    said = _fm(tmp_path, "install", "claude")
    assert "restored .claude/settings.json" in said and "moved Firstmate's hooks out of" in said
    assert shared.read_bytes() == theirs
    assert not shared.with_name("settings.json.fm-backup").exists()
    assert "fm hook claude stop" in (tmp_path / ".claude" / "settings.local.json").read_text()
    _fm(tmp_path, "uninstall", "claude")
    assert shared.read_bytes() == theirs
    assert sorted(p.name for p in shared.parent.iterdir()) == ["settings.json"]


def test_claude_declares_the_supervision_host_engine_and_its_project_dir() -> None:
    from firstmate.testing.state import default_host_engine
    from firstmate_plugin_claude.hooks import INFO

    assert INFO.host_engine == ("claude", "-p", "--permission-mode", "dontAsk", "--allowedTools",
                                "Bash,Read", "--model", "sonnet")
    assert default_host_engine({"FIRSTMATE_PLUGINS": "claude"}) == INFO.host_engine
    assert INFO.project_env == ("CLAUDE_PROJECT_DIR",)
