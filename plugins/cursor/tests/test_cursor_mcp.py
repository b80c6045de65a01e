"""``fm install cursor`` registers ``fm mcp`` in the project's ``.cursor/mcp.json`` (when this
fm has the MCP SDK), with the hooks' own absolute entry point and home, beside the user's
servers and kept out of git; ``fm doctor`` checks it and ``fm uninstall cursor`` takes out
exactly it. Real ``fm`` processes, real files, real git."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from firstmate.testing.installs import config_finding, run_fm, scratch_project
from firstmate.testing.mcpinstalls import (
    git_status,
    needs_sdk,
    stale_entry_is_found_and_fixed,
    users_own_server_is_refused,
)

pytestmark = needs_sdk


def fm(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_fm(env, cwd, *args)


@pytest.fixture
def rig(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    return scratch_project(tmp_path, drop=("CURSOR",))


def _finding(env: dict[str, str], project: Path) -> dict[str, Any]:
    return config_finding(env, project, "cursor")


def test_install_registers_the_server_beside_the_users_doctor_checks_uninstall_removes(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, home = rig
    config = project / ".cursor" / "mcp.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"mcpServers": {"db": {"command": "db-server",
                                                        "args": ["--port", "1"]}}}, indent=2))
    install = ("install", "cursor", "--project", str(project), "--home", str(home))
    done = fm(env, project, *install)
    assert done.returncode == 0, done.stderr
    assert "cursor-agent mcp enable firstmate" in done.stdout
    hooks = json.loads((Path(env["HOME"]) / ".cursor" / "hooks.json").read_text())["hooks"]
    fm_path = hooks["stop"][0]["command"].split()[0]
    assert os.path.isabs(fm_path)
    entry = {"command": fm_path, "args": ["mcp", "--home", str(home)]}
    assert json.loads(config.read_text()) == {"mcpServers": {
        "db": {"command": "db-server", "args": ["--port", "1"]}, "firstmate": entry}}
    assert git_status(project) == ""  # (it names this machine's fm: kept out of git)
    assert _finding(env, project)["status"] == "ok"
    stale_entry_is_found_and_fixed(env, project, "cursor", config,
                                   lambda good: good.replace(json.dumps(fm_path), '"/old/fm"'))

    # A server the user adds afterwards stays; the uninstall takes out exactly ours.
    doc = json.loads(config.read_text())
    doc["mcpServers"]["later"] = {"url": "http://127.0.0.1:9/mcp"}
    config.write_text(json.dumps(doc))
    done = fm(env, project, "uninstall", "cursor", "--project", str(project))
    assert done.returncode == 0, done.stderr
    assert json.loads(config.read_text()) == {"mcpServers": {
        "db": {"command": "db-server", "args": ["--port", "1"]},
        "later": {"url": "http://127.0.0.1:9/mcp"}}}


def test_a_file_fm_made_goes_with_the_uninstall(rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, _home = rig
    assert fm(env, project, "install", "cursor", "--project", str(project)).returncode == 0
    assert "firstmate" in json.loads(
        (project / ".cursor" / "mcp.json").read_text())["mcpServers"]
    assert fm(env, project, "uninstall", "cursor", "--project", str(project)).returncode == 0
    assert not (project / ".cursor").exists()


def test_a_server_of_the_users_own_named_firstmate_is_refused_in_one_line(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, _home = rig
    users_own_server_is_refused(env, project, "cursor", project / ".cursor" / "mcp.json",
                                '{"mcpServers": {"firstmate": {"command": "my-own-firstmate"}}}\n')
    assert not (Path(env["HOME"]) / ".cursor").exists()  # (nothing else changed either)


def test_a_tracked_mcp_json_is_left_alone_and_the_personal_file_is_named(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, _home = rig
    config = project / ".cursor" / "mcp.json"
    config.parent.mkdir()
    config.write_text('{"mcpServers": {}}\n')
    subprocess.run(["git", "-C", str(project), "add", ".cursor/mcp.json"], check=True)
    done = fm(env, project, "install", "cursor", "--project", str(project))
    assert done.returncode == 0, done.stderr
    assert config.read_text() == '{"mcpServers": {}}\n'
    assert "git tracks .cursor/mcp.json" in done.stdout and "~/.cursor/mcp.json" in done.stdout
    assert _finding(env, project)["status"] == "ok"
