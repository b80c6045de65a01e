"""``fm install codex`` registers ``fm mcp`` as ``[mcp_servers.firstmate]`` in the project's
``.codex/config.toml`` (when this fm has the MCP SDK), with the hook's own absolute entry point and home,
the rest of the file kept byte for byte and the file kept out of git; ``fm doctor`` checks it
and ``fm uninstall codex`` takes out exactly it. Real ``fm`` processes, real files, real git."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from firstmate.plugin.mcpsdk import sdk_missing
from firstmate.testing.installs import config_finding, run_fm, scratch_project

pytestmark = pytest.mark.skipif(sdk_missing() is not None,
                                reason="the MCP SDK is not installed (tox -e mcp)")

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


def fm(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_fm(env, cwd, *args)


@pytest.fixture
def rig(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    return scratch_project(tmp_path, drop=("CODEX",), CODEX_HOME=str(tmp_path / "codex-home"))


def _finding(env: dict[str, str], project: Path) -> dict[str, Any]:
    return config_finding(env, project, "codex")


def test_install_appends_our_table_doctor_checks_it_uninstall_puts_the_file_back(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, home = rig
    config = project / ".codex/config.toml"
    config.parent.mkdir()
    config.write_text(USERS)
    install = ("install", "codex", "--project", str(project), "--home", str(home))
    done = fm(env, project, *install)
    assert done.returncode == 0, done.stderr
    assert "project you trust" in done.stdout
    text = config.read_text()
    assert text.startswith(USERS + "\n[mcp_servers.firstmate]\n")
    doc = tomllib.loads(text)
    entry = doc["mcp_servers"]["firstmate"]
    assert os.path.isabs(entry["command"]) and entry["args"] == ["mcp", "--home", str(home)]
    # (in a git project the hook goes into $CODEX_HOME/hooks.json, with the same entry point)
    assert entry["command"] in (Path(env["CODEX_HOME"]) / "hooks.json").read_text()
    assert doc["mcp_servers"]["db"] == {"command": "db-server", "args": ["--port", "5432"]}
    status = subprocess.run(["git", "-C", str(project), "status", "--porcelain"],
                            capture_output=True, text=True, check=True).stdout
    assert status == "", status  # (it names this machine's fm: kept out of git)
    assert _finding(env, project)["status"] == "ok"
    assert fm(env, project, *install).returncode == 0 and config.read_text() == text

    # A stale entry is found by doctor and put back in place by install.
    config.write_text(text.replace(json.dumps(entry["command"]), '"/old/fm"'))
    finding = _finding(env, project)
    assert finding["status"] == "warn" and ".codex/config.toml" in finding["detail"]
    assert fm(env, project, *finding["fix"].split()[1:]).returncode == 0
    assert config.read_text() == text

    done = fm(env, project, "uninstall", "codex", "--project", str(project))
    assert done.returncode == 0, done.stderr
    assert config.read_text() == USERS


def test_a_server_of_the_users_own_named_firstmate_is_refused_in_one_line(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, _home = rig
    config = project / ".codex/config.toml"
    config.parent.mkdir()
    original = '[mcp_servers.firstmate]\ncommand = "npx"\nargs = ["firstmate-server"]\n'
    config.write_text(original)
    done = fm(env, project, "install", "codex", "--project", str(project))
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "a server of your own, not fm mcp; rename it" in done.stderr
    assert config.read_text() == original
