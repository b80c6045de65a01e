"""End to end: ``fm crew spawn`` starts the real OpenCode (npm ``opencode-ai``) TUI as a crew in
a tmux window, against a loopback mock of the chat-completions API, under the primary's real
``fm arm``. The crew plugin ``fm crew spawn`` writes into the crew's own ``OPENCODE_CONFIG_DIR``
records its turn end, the primary's watcher closes with ``signal: <crew>.turn-ended``, the crew
never armed a watcher, and the project's own OpenCode config was not touched.

Skips without node/npm, git or tmux. The npm install is cached under ``.e2e-cache/``; at its
first start OpenCode installs its plugin SDK into the crew's config directory from the npm
registry, which is why the wake has a longer deadline than the other crews'.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from crew_rig import CrewRig
from mock_api import MockApi
from rig import needs_node, source_paths
from test_opencode_inproc import opencode_bin

pytestmark = [
    needs_node,
    pytest.mark.skipif(shutil.which("tmux") is None,
                       reason="tmux is not installed: crews run in tmux windows"),
    pytest.mark.skipif(shutil.which("git") is None,
                       reason="git is needed: the OpenCode project is a git checkout"),
    pytest.mark.timeout(600),
]


def test_a_spawned_opencode_crew_records_its_turn_end(tmp_path: Path, mock: MockApi) -> None:
    opencode = opencode_bin()
    rig = CrewRig(tmp_path)
    rig.setup(source_paths(), [opencode.parent],
              {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1"})
    config = json.dumps({
        "provider": {"mock": {"npm": "@ai-sdk/openai-compatible", "name": "Mock",
                              "options": {"baseURL": mock.openai_url, "apiKey": "sk-dummy"},
                              "models": {"mock-model": {"name": "Mock Model"}}}},
        "model": "mock/mock-model", "small_model": "mock/mock-model",
        "autoupdate": False, "share": "disabled"})
    (rig.project / "opencode.json").write_text(config)
    subprocess.run(["git", "init", "-q"], cwd=rig.project, check=True, env=rig.env)
    try:
        rig.turn_end_wakes("builder", "opencode", deadline=240)
        assert mock.seen("REPORTING PROTOCOL")  # the brief was the crew's first prompt
        # The crew's plugin lives in its own launch directory, never in the project.
        # (OpenCode itself adds a "$schema" key to the project's config.)
        project_config = json.loads((rig.project / "opencode.json").read_text())
        project_config.pop("$schema", None)
        assert project_config == json.loads(config)
        assert not (rig.project / ".opencode").exists() or not any(
            "firstmate" in p.name for p in (rig.project / ".opencode").rglob("*"))
    finally:
        rig.teardown()
