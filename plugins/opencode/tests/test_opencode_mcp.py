"""``fm install opencode`` registers ``fm mcp`` as a local server in the project's
``.opencode/opencode.json`` (when this fm has the MCP SDK), with the entry point the shim's
bridge runs; ``fm doctor`` checks it and ``fm uninstall opencode`` takes out exactly it. Real
``fm`` processes, real files, real git."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from firstmate.testing import DEADLINE, fm_command
from firstmate.testing.mcpinstalls import git_status, needs_sdk, stale_entry_is_found_and_fixed

pytestmark = needs_sdk


def fm(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(fm_command(*args), capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=DEADLINE * 4, check=False)


def test_install_registers_a_local_server_doctor_checks_uninstall_takes_out_exactly_it(
        tmp_path: Path) -> None:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FM_", "OPENCODE"))}
    env.update(FM_HOME=str(home), FIRSTMATE_KEYS_DIR=str(tmp_path / "keys"))
    config = project / ".opencode" / "opencode.json"
    done = fm(env, project, "install", "opencode", "--project", str(project), "--home", str(home))
    assert done.returncode == 0, done.stderr
    launch = json.loads((project / ".opencode" / "firstmate" / "launch.json").read_text())
    entry = json.loads(config.read_text())["mcp"]["firstmate"]
    assert entry["type"] == "local" and entry["enabled"] is True
    assert entry["command"][-3:] == ["mcp", "--home", str(home)]
    assert os.path.isabs(entry["command"][0]) and entry["command"][0] in json.dumps(launch)
    assert git_status(project) == ""  # (kept out of git with the shim)
    stale_entry_is_found_and_fixed(
        env, project, "opencode", config,
        lambda good: good.replace(json.dumps(entry["command"][0]), '"/old/fm"'))

    # OpenCode adds its own key when it runs; the uninstall keeps it and takes out ours.
    doc = json.loads(config.read_text())
    doc["$schema"] = "https://opencode.ai/config.json"
    config.write_text(json.dumps(doc))
    assert fm(env, project, "uninstall", "opencode", "--project", str(project)).returncode == 0
    assert json.loads(config.read_text()) == {"$schema": "https://opencode.ai/config.json"}
