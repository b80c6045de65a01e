from __future__ import annotations

import json
import subprocess
import sys

from firstmate_plugin_claude import plugin
from firstmate_plugin_claude.hooks import INFO


def test_declares_its_harness() -> None:
    assert plugin.firstmate_harness_info() is INFO
    assert INFO.name == "claude"


def test_discovered_through_the_entry_point() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "firstmate", "plugins", "--json", "--require", "claude"],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    names = [p["name"] for p in json.loads(out.stdout)["plugins"]]
    assert "claude" in names


def test_claude_declares_the_supervision_host_engine_and_its_project_dir() -> None:
    from firstmate import host

    info = INFO
    assert info.host_engine == ("claude", "-p", "--permission-mode", "dontAsk", "--allowedTools",
                                "Bash,Read", "--model", "sonnet")
    assert host.default_engine({"FIRSTMATE_PLUGINS": "claude"}) == info.host_engine
    assert info.project_env == ("CLAUDE_PROJECT_DIR",)
