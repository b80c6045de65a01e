"""``fm install codex`` registers ``fm mcp`` as ``[mcp_servers.firstmate]`` in the project's
``.codex/config.toml`` (when this fm has the MCP SDK), with the hook's own absolute entry point
and home, the rest of the file kept byte for byte and the file kept out of git; ``fm doctor``
checks it and ``fm uninstall codex`` takes out exactly it. Real ``fm`` processes, real files,
real git."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest
from firstmate.testing.installs import config_finding, scratch_project
from firstmate.testing.mcpinstalls import (
    git_status,
    install,
    needs_sdk,
    stale_entry_is_found_and_fixed,
    uninstall,
    users_own_server_is_refused,
)

pytestmark = needs_sdk

#: A user's own config: comments, a server of theirs, a table after it.
USERS = '''\
# mine
model = "o3"  # fast

[mcp_servers.db]
command = 'db-server'
args = ["--port", "5432"]

[profiles.deep]
model = "o3-pro"
'''


@pytest.fixture
def rig(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    return scratch_project(tmp_path, drop=("CODEX",), CODEX_HOME=str(tmp_path / "codex-home"))


def test_install_appends_our_table_doctor_checks_it_uninstall_puts_the_file_back(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, home = rig
    config = project / ".codex/config.toml"
    config.parent.mkdir()
    config.write_text(USERS)
    assert "project you trust" in install(env, project, "codex", "--home", str(home))
    text = config.read_text()
    assert text.startswith(USERS + "\n[mcp_servers.firstmate]\n")
    doc = tomllib.loads(text)
    entry = doc["mcp_servers"]["firstmate"]
    assert os.path.isabs(entry["command"]) and entry["args"] == ["mcp", "--home", str(home)]
    # (in a git project the hook goes into $CODEX_HOME/hooks.json, with the same entry point)
    assert entry["command"] in (Path(env["CODEX_HOME"]) / "hooks.json").read_text()
    assert doc["mcp_servers"]["db"] == {"command": "db-server", "args": ["--port", "5432"]}
    assert git_status(project) == ""  # (it names this machine's fm: kept out of git)
    assert config_finding(env, project, "codex")["status"] == "ok"
    install(env, project, "codex", "--home", str(home))
    assert config.read_text() == text

    stale_entry_is_found_and_fixed(
        env, project, "codex", config,
        lambda good: good.replace(json.dumps(entry["command"]), '"/old/fm"'))
    uninstall(env, project, "codex")
    assert config.read_text() == USERS


def test_a_server_of_the_users_own_named_firstmate_is_refused_in_one_line(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, _home = rig
    users_own_server_is_refused(
        env, project, "codex", project / ".codex/config.toml",
        '[mcp_servers.firstmate]\ncommand = "npx"\nargs = ["firstmate-server"]\n')
