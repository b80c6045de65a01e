"""``fm install omp`` registers ``fm mcp`` in the project's ``.omp/mcp.json`` (when this fm has
the MCP SDK), with the entry point the extension's bridge runs, beside the user's servers and
kept out of git; ``fm doctor`` checks it and ``fm uninstall omp`` takes out exactly it. Real
``fm`` processes, real files, real git."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from firstmate.testing.installs import run_fm, scratch_project
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
    return scratch_project(tmp_path, drop=("OMP", "PI_"))


def test_install_registers_the_server_beside_the_users_doctor_checks_uninstall_removes(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, home = rig
    config = project / ".omp" / "mcp.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"mcpServers": {"db": {"command": "db-server"}}}, indent=2))
    install = ("install", "omp", "--project", str(project), "--home", str(home))
    done = fm(env, project, *install)
    assert done.returncode == 0, done.stderr
    assert "firstmate MCP server" in done.stdout
    entry = json.loads(config.read_text())["mcpServers"]["firstmate"]
    assert entry["args"] == ["mcp", "--home", str(home)] and set(entry) == {"command", "args"}
    support = project / ".omp" / "extensions" / "firstmate"
    shipped = "".join(p.read_text() for p in support.rglob("*") if p.is_file())
    assert os.path.isabs(entry["command"]) and json.dumps(entry["command"])[1:-1] in shipped
    assert json.loads(config.read_text())["mcpServers"]["db"] == {"command": "db-server"}
    assert git_status(project) == ""  # (kept out of git with the extension)

    def spoil(good: str) -> str:
        doc = json.loads(good)
        doc["mcpServers"]["firstmate"]["args"] = ["mcp"]
        return json.dumps(doc)

    stale_entry_is_found_and_fixed(env, project, "omp", config, spoil)

    done = fm(env, project, "uninstall", "omp", "--project", str(project))
    assert done.returncode == 0, done.stderr
    assert json.loads(config.read_text()) == {"mcpServers": {"db": {"command": "db-server"}}}
    assert not support.exists()


def test_a_server_of_the_users_own_named_firstmate_is_refused_and_nothing_installed(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, _home = rig
    config = project / ".omp" / "mcp.json"
    users_own_server_is_refused(
        env, project, "omp", config,
        '{"mcpServers": {"firstmate": {"command": "npx", "args": ["firstmate"]}}}\n')
    assert sorted(p.name for p in config.parent.iterdir()) == ["mcp.json"]  # (no extension)
