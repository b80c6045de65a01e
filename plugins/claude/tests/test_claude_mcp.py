"""``fm install claude`` registers ``fm mcp`` in the project's ``.mcp.json`` (when this fm has
the MCP SDK), with the hooks' own absolute entry point and home; ``fm doctor`` checks it and
``fm uninstall claude`` takes out exactly it. Real ``fm`` processes, real files, real git."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from firstmate.plugin.mcpsdk import sdk_missing
from firstmate.testing import DEADLINE, fm_command

pytestmark = pytest.mark.skipif(sdk_missing() is not None,
                                reason="the MCP SDK is not installed (tox -e mcp)")


def fm(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(fm_command(*args), capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=DEADLINE * 4, check=False)


@pytest.fixture
def rig(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FM_", "CLAUDE_"))}
    env.update(FM_HOME=str(home), CLAUDE_CONFIG_DIR=str(tmp_path / "claude-config"),
               FIRSTMATE_KEYS_DIR=str(tmp_path / "keys"))
    return env, project, home


def _finding(env: dict[str, str], project: Path) -> dict[str, Any]:
    done = fm(env, project, "doctor", "--json")
    found = [f for f in json.loads(done.stdout)["findings"]
             if f["check"] == "harness-config" and "claude" in f["detail"]]
    assert len(found) == 1, found
    return found[0]


def test_install_registers_the_server_beside_the_users_doctor_checks_uninstall_removes(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, home = rig
    mcp_json = project / ".mcp.json"
    mcp_json.write_text(json.dumps({"mcpServers": {"db": {"command": "db-server"}}}, indent=2))
    done = fm(env, project, "install", "claude", "--project", str(project), "--home", str(home))
    assert done.returncode == 0, done.stderr
    assert "merged .mcp.json" in done.stdout and "mcp__firstmate" in done.stdout
    servers = json.loads(mcp_json.read_text())["mcpServers"]
    hooks = json.loads((project / ".claude" / "settings.local.json").read_text())["hooks"]
    fm_path = hooks["Stop"][0]["hooks"][0]["command"].split()[0]
    assert os.path.isabs(fm_path)
    assert servers == {"db": {"command": "db-server"},
                       "firstmate": {"type": "stdio", "command": fm_path,
                                     "args": ["mcp", "--home", str(home)]}}
    assert "/.mcp.json" in (project / ".git" / "info" / "exclude").read_text()
    record = json.loads((home / "config" / "installs" / "claude.json").read_text())
    assert record["installs"][0]["mcp"] is True
    assert _finding(env, project)["status"] == "ok"

    # The entry taken out by hand: doctor says so and names the install that puts it back.
    doc = json.loads(mcp_json.read_text())
    del doc["mcpServers"]["firstmate"]
    mcp_json.write_text(json.dumps(doc))
    finding = _finding(env, project)
    assert finding["status"] == "warn" and ".mcp.json" in finding["detail"]
    assert finding["fix"].startswith("fm install claude --project")
    assert fm(env, project, *finding["fix"].split()[1:]).returncode == 0
    assert _finding(env, project)["status"] == "ok"

    done = fm(env, project, "uninstall", "claude", "--project", str(project))
    assert done.returncode == 0, done.stderr
    assert json.loads(mcp_json.read_text()) == {"mcpServers": {"db": {"command": "db-server"}}}
    assert not (project / ".claude" / "settings.local.json").exists()


def test_a_tracked_mcp_json_is_left_alone_and_the_local_scope_command_is_named(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, _home = rig
    mcp_json = project / ".mcp.json"
    mcp_json.write_text('{"mcpServers": {}}\n')
    subprocess.run(["git", "-C", str(project), "add", ".mcp.json"], check=True)
    done = fm(env, project, "install", "claude", "--project", str(project))
    assert done.returncode == 0, done.stderr
    assert mcp_json.read_text() == '{"mcpServers": {}}\n'
    assert "git tracks .mcp.json" in done.stdout
    assert "claude mcp add --scope local firstmate -- /" in done.stdout
    assert (project / ".claude" / "settings.local.json").exists()  # (the hooks still go in)
    assert _finding(env, project)["status"] == "ok"
