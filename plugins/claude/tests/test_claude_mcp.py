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
from firstmate.testing.installs import config_finding, run_fm, scratch_project
from firstmate.testing.mcpinstalls import needs_sdk

pytestmark = needs_sdk


def fm(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_fm(env, cwd, *args)


@pytest.fixture
def rig(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    return scratch_project(tmp_path, drop=("CLAUDE_",), CLAUDE_CONFIG_DIR=str(tmp_path / "claude-config"))


def _finding(env: dict[str, str], project: Path) -> dict[str, Any]:
    return config_finding(env, project, "claude")


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
    local = json.loads((project / ".claude" / "settings.local.json").read_text())
    assert "hooks" in local  # (the hooks still go in)
    assert "enabledMcpjsonServers" not in local  # (no server registered: none approved)
    assert _finding(env, project)["status"] == "ok"


def _local(project: Path) -> Path:
    return project / ".claude" / "settings.local.json"


def test_install_approves_its_server_beside_the_users_and_uninstall_puts_the_file_back(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    # Claude Code asks about a .mcp.json server before the session (and its SessionStart hook)
    # starts: the install approves its own server in the hooks' personal settings.
    env, project, home = rig
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"db": {"command": "db"}}}))
    _local(project).parent.mkdir()
    original = ('{\n    "model": "opus",\n    "enabledMcpjsonServers": ["db"],\n'
                '    "permissions": {"allow": ["Bash(ls:*)"]}\n}\n')
    _local(project).write_text(original)
    install = ("install", "claude", "--project", str(project), "--home", str(home))
    done = fm(env, project, *install)
    assert done.returncode == 0, done.stderr
    assert "without asking" in done.stdout
    local = json.loads(_local(project).read_text())
    assert local["enabledMcpjsonServers"] == ["db", "firstmate"]
    assert local["model"] == "opus" and local["permissions"] == {"allow": ["Bash(ls:*)"]}
    assert "firstmate" in json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert _finding(env, project)["status"] == "ok"  # (the approval is the install's own)

    # Installed again: the same bytes, our name once.
    installed = _local(project).read_bytes()
    done = fm(env, project, *install)
    assert done.returncode == 0, done.stderr
    assert "unchanged .claude/settings.local.json" in done.stdout
    assert _local(project).read_bytes() == installed
    assert _finding(env, project)["status"] == "ok"

    # The approval taken out by hand: doctor names the install that puts it back.
    doc = json.loads(installed)
    doc["enabledMcpjsonServers"] = ["db"]
    _local(project).write_text(json.dumps(doc, indent=4) + "\n")
    finding = _finding(env, project)
    assert finding["status"] == "warn" and "settings.local.json" in finding["detail"]
    assert fm(env, project, *finding["fix"].split()[1:]).returncode == 0
    assert json.loads(_local(project).read_text())["enabledMcpjsonServers"] == ["db", "firstmate"]

    done = fm(env, project, "uninstall", "claude", "--project", str(project))
    assert done.returncode == 0, done.stderr
    assert _local(project).read_text() == original
    assert json.loads((project / ".mcp.json").read_text()) == {"mcpServers": {"db": {"command": "db"}}}


def test_uninstall_after_the_user_changed_the_settings_takes_out_only_our_approval(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, home = rig
    done = fm(env, project, "install", "claude", "--project", str(project), "--home", str(home))
    assert done.returncode == 0, done.stderr
    assert json.loads(_local(project).read_text())["enabledMcpjsonServers"] == ["firstmate"]
    # Claude Code (or the user) adds to the file fm created: an approval and a permission.
    doc = json.loads(_local(project).read_text())
    doc["enabledMcpjsonServers"].insert(0, "later")
    doc["permissions"] = {"allow": ["mcp__later"]}
    _local(project).write_text(json.dumps(doc, indent=2))
    done = fm(env, project, "uninstall", "claude", "--project", str(project))
    assert done.returncode == 0, done.stderr
    assert json.loads(_local(project).read_text()) == {
        "enabledMcpjsonServers": ["later"], "permissions": {"allow": ["mcp__later"]}}
    # Installed again: our name joins the user's list again, once.
    done = fm(env, project, "install", "claude", "--project", str(project), "--home", str(home))
    assert done.returncode == 0, done.stderr
    assert json.loads(_local(project).read_text())["enabledMcpjsonServers"] == ["later",
                                                                                "firstmate"]


def test_a_name_the_user_approved_before_the_install_stays_after_the_uninstall(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, home = rig
    _local(project).parent.mkdir()
    _local(project).write_text(json.dumps({"enabledMcpjsonServers": "firstmate"}))
    done = fm(env, project, "install", "claude", "--project", str(project), "--home", str(home))
    assert done.returncode == 0, done.stderr
    # (a lone name is a list of one to Claude Code: ours is in it already)
    assert json.loads(_local(project).read_text())["enabledMcpjsonServers"] == ["firstmate"]
    doc = json.loads(_local(project).read_text())
    doc["model"] = "opus"
    _local(project).write_text(json.dumps(doc))
    done = fm(env, project, "uninstall", "claude", "--project", str(project))
    assert done.returncode == 0, done.stderr
    assert json.loads(_local(project).read_text()) == {"enabledMcpjsonServers": ["firstmate"],
                                                       "model": "opus"}
