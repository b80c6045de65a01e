"""``fm install grok`` registers ``fm mcp`` as ``[mcp_servers.firstmate]`` in the project's
``.grok/config.toml`` (when this fm has the MCP SDK), with the Stop hook's own absolute entry
point and home, the rest of the file kept byte for byte and the file kept out of git; ``fm
doctor`` checks it and ``fm uninstall grok`` takes out exactly it. Real ``fm`` processes, real
files, real git."""

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
model = "grok-4"  # fast

[mcp_servers.db]
command = 'db-server'
args = ["--port", "5432"]

[ui]
theme = "dark"
'''


@pytest.fixture
def rig(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    return scratch_project(tmp_path, drop=("GROK",))


def test_install_appends_our_table_doctor_checks_it_uninstall_puts_the_file_back(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, home = rig
    config = project / ".grok/config.toml"
    config.parent.mkdir()
    config.write_text(USERS)
    assert "firstmate__<tool>" in install(env, project, "grok", "--home", str(home))
    text = config.read_text()
    assert text.startswith(USERS + "\n[mcp_servers.firstmate]\n")
    doc = tomllib.loads(text)
    entry = doc["mcp_servers"]["firstmate"]
    assert os.path.isabs(entry["command"]) and entry["args"] == ["mcp", "--home", str(home)]
    assert entry["command"] in (project / ".grok" / "hooks" / "firstmate.json").read_text()
    assert doc["mcp_servers"]["db"] == {"command": "db-server", "args": ["--port", "5432"]}
    assert git_status(project) == ""  # (it names this machine's fm: kept out of git)
    assert config_finding(env, project, "grok")["status"] == "ok"
    install(env, project, "grok", "--home", str(home))
    assert config.read_text() == text

    stale_entry_is_found_and_fixed(
        env, project, "grok", config,
        lambda good: good.replace(json.dumps(entry["command"]), '"/old/fm"'))
    uninstall(env, project, "grok")
    assert config.read_text() == USERS


def test_a_server_of_the_users_own_named_firstmate_is_refused_in_one_line(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, _home = rig
    users_own_server_is_refused(
        env, project, "grok", project / ".grok/config.toml",
        '[mcp_servers.firstmate]\ncommand = "npx"\nargs = ["firstmate-server"]\n')
