"""End to end: ``fm crew spawn`` starts the real omp (npm ``@oh-my-pi/pi-coding-agent`` on Bun) as
a crew in a tmux window, against a loopback mock of the chat-completions API, under the
primary's real ``fm arm``. The crew's own extension (``omp -e``) records its turn end, the
primary's watcher closes with ``signal: <crew>.turn-ended``, and the crew never armed a watcher.

Skips without node/npm or tmux. The npm install is cached under ``.e2e-cache/``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from crew_rig import CrewRig
from mock_api import MockApi
from rig import needs_node, source_paths
from test_omp_inproc import omp_bin

pytestmark = [
    needs_node,
    pytest.mark.skipif(shutil.which("tmux") is None,
                       reason="tmux is not installed: crews run in tmux windows"),
    pytest.mark.timeout(300),
]


def test_a_spawned_omp_crew_records_its_turn_end(tmp_path: Path, mock: MockApi) -> None:
    omp = omp_bin()
    rig = CrewRig(tmp_path)
    rig.setup(source_paths(), [omp.parent], {})
    agent = rig.user / ".omp" / "agent"
    agent.mkdir(parents=True)
    (agent / "models.yml").write_text(f"""providers:
  mock:
    baseUrl: {mock.openai_url}
    api: openai-completions
    apiKey: sk-dummy
    auth: apiKey
    models: [{{id: mock-model, name: Mock, reasoning: false, input: [text], contextWindow: 200000, maxTokens: 4096}}]
""")
    (agent / "config.yml").write_text(
        "startup: {setupWizard: false, showSplash: false, checkUpdate: false, quiet: true}\n")
    try:
        rig.turn_end_wakes("builder", "omp", "--harness-arg=--model=mock/mock-model")
        assert mock.seen("REPORTING PROTOCOL")  # the brief was the crew's first prompt
    finally:
        rig.teardown()
