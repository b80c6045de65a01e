"""The real OpenCode (npm ``opencode-ai``) starts the firstmate MCP server ``fm install
opencode`` registered in the project's ``.opencode/opencode.json`` and connects to it
(``opencode mcp list``: the server started, the MCP handshake answered), with no step of the
user's; after ``fm uninstall opencode`` it no longer lists it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_opencode_inproc import opencode_bin, pytestmark  # noqa: F401  (node, git, timeout)


def _listed(opencode: Path, project: Path, env: dict[str, str]) -> str:
    done = subprocess.run([str(opencode), "mcp", "list"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120, check=False,
                          stdin=subprocess.DEVNULL)
    return re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)


def test_real_opencode_connects_to_the_registered_firstmate_server(tmp_path: Path) -> None:
    from firstmate.plugin.mcpsdk import sdk_missing

    if sdk_missing() is not None:
        pytest.skip("the MCP SDK is not installed: fm install registers no server")
    opencode = opencode_bin()
    project, home, user = tmp_path / "project", tmp_path / "fmhome", tmp_path / "user"
    project.mkdir()
    user.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FM_", "OPENCODE"))}
    env.update(HOME=str(user), FM_HOME=str(home), FIRSTMATE_KEYS_DIR=str(tmp_path / "keys"),
               XDG_CONFIG_HOME=str(user / ".config"), XDG_DATA_HOME=str(user / ".local/share"),
               OPENCODE_DISABLE_AUTOUPDATE="1", OPENCODE_DISABLE_MODELS_FETCH="1")
    fm = [sys.executable, "-m", "firstmate"]
    done = subprocess.run([*fm, "install", "opencode", "--project", str(project), "--home",
                           str(home)], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    listed = _listed(opencode, project, env)
    assert re.search(r"firstmate\s+connected", listed), listed
    done = subprocess.run([*fm, "uninstall", "opencode", "--project", str(project)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "firstmate" not in _listed(opencode, project, env)
