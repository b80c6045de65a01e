"""End to end: ``fm crew spawn`` starts the real Codex TUI (npm ``@openai/codex``) as a crew in a
tmux window, against a loopback mock of the Responses API, under the primary's real ``fm arm``.
The crew's ``notify`` program (set with ``-c`` for its session alone) records its turn end, the
primary's watcher closes with ``signal: <crew>.turn-ended``, and the crew never armed a watcher.

Skips without node/npm or tmux. The npm install is cached under ``.e2e-cache/``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crew_rig import CrewRig
from mock_responses import start
from test_codex_e2e import codex_bin

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                       reason="node and npm are needed to install and run the real Codex CLI"),
    pytest.mark.skipif(shutil.which("tmux") is None,
                       reason="tmux is not installed: crews run in tmux windows"),
    pytest.mark.timeout(300),
]


def test_a_spawned_codex_crew_records_its_turn_end(tmp_path: Path) -> None:
    codex = codex_bin()
    mock = start()
    rig = CrewRig(tmp_path)
    rig.setup([str(REPO / "core"), str(REPO / "plugins" / "codex" / "src")], [codex.parent],
              {"MOCK_API_KEY": "sk-dummy"})
    (rig.user / ".codex").mkdir(parents=True)
    (rig.user / ".codex" / "config.toml").write_text(f'''\
model = "mock-model"
model_provider = "mock"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
[model_providers.mock]
name = "Mock"
base_url = "{mock.base_url}"
env_key = "MOCK_API_KEY"
wire_api = "responses"
[projects."{rig.project}"]
trust_level = "trusted"
''')
    try:
        rig.turn_end_wakes("builder", "codex")
        assert mock.seen("REPORTING PROTOCOL")  # the brief was the crew's first prompt
    finally:
        rig.teardown()
        mock.close()
