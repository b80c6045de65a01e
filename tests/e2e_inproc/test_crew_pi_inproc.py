"""End to end: ``fm crew spawn`` starts the real Pi (npm ``@mariozechner/pi-coding-agent``) as a
crew in a tmux window, against a loopback mock of the Anthropic Messages API, while the
primary's real ``fm arm`` watches the same home.

The project has the primary's own Pi extension (``fm install pi``) and the crew works in that
very directory, so the crew's Pi loads it too: it must stay inert there (its bridge is out of
scope in a crew's session). The crew's own extension (``pi -e``, written into its launch
directory) records its turn ends. The mock answers the brief with a bash tool call running the
status command the brief names. Then the primary's watcher closes with the crew's status line or
its turn end, and the crew's session never armed a watcher.

Skipped when node/npm or tmux are absent. The npm install is cached under ``.e2e-cache/``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import uuid
from pathlib import Path

import pytest
from firstmate.testing.procs import eventually

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from crew_rig import DEADLINE, CrewRig, ToolMock
from rig import needs_node, source_paths
from test_pi_inproc import pi_bin

pytestmark = [
    needs_node,
    pytest.mark.skipif(shutil.which("tmux") is None,
                       reason="tmux is not installed: crews run in tmux windows"),
    pytest.mark.timeout(300),
]


def test_a_spawned_pi_crew_reports_and_the_primary_wakes(tmp_path: Path) -> None:
    pi = pi_bin()
    note = f"E2E-PI-CREW-{uuid.uuid4().hex[:8]}"
    mock = ToolMock(note).start()
    rig = CrewRig(tmp_path)
    rig.setup(source_paths(), [pi.parent], {"PI_OFFLINE": "1"})
    agent = rig.user / ".pi" / "agent"
    agent.mkdir(parents=True)
    (agent / "models.json").write_text(json.dumps({"providers": {"mock": {
        "baseUrl": mock.root, "api": "anthropic-messages", "apiKey": "sk-dummy",
        "models": [{"id": "mock-model", "reasoning": False, "input": ["text"],
                    "contextWindow": 200000, "maxTokens": 4096}]}}}))
    try:
        installed = rig.fm("install", "pi", "--project", str(rig.project),
                           "--fm-command", str(rig.fm_wrapper))
        assert installed.returncode == 0, installed.stderr
        arm = rig.arm_primary()
        done = rig.fm("crew", "spawn", "builder", "--harness", "pi", "--cwd", str(rig.project),
                      "--fm-command", str(rig.fm_wrapper),
                      # Pi takes an option's value as the next word.
                      "--harness-arg=--provider", "--harness-arg=mock",
                      "--harness-arg=--model", "--harness-arg=mock-model",
                      "--", "Say hello, then report done.")
        assert done.returncode == 0, done.stderr

        diag = lambda: f"{rig.diag('builder')}\nrequests:\n{mock.describe()}"  # noqa: E731
        reason = arm.wait_reason(deadline=60)
        assert reason.startswith("signal: builder."), f"{reason}\n{diag()}"
        assert note in reason or reason.startswith("signal: builder.turn-ended"), reason
        status = rig.home.crew_dir / "builder.status"
        eventually("the crew's status line",
                   lambda: status.exists() and f"done: {note}" in status.read_text(),
                   deadline=DEADLINE, diag=diag)
        # The crew's own extension recorded the turn end, through the same fm wrapper.
        eventually("the crew's turn-end marker",
                   lambda: (rig.home.crew_dir / "builder.turn-ended").exists(),
                   deadline=DEADLINE, diag=diag)
        calls = [args for _pid, crew, args in rig.calls() if crew == "builder"]
        assert "crew turn-ended builder" in calls, calls
        # The primary's extension loaded in the crew's Pi as well, and its bridge stood down.
        assert "bridge pi" in calls, calls
        # The primary handles the wake: the drain presents the crew's report.
        assert f"done: {note}" in rig.handle_wake()
        # A second, plain turn (steered in, no report) wakes the primary with its turn end.
        second = rig.steered_turn_wakes("builder", diag)
        rig.assert_crew_never_armed("builder")
        with contextlib.suppress(OSError):
            (tmp_path.parent / "crew-pi-e2e-evidence.txt").write_text(
                f"reason: {reason}\nsecond: {second}\ntool call: {mock.tool_calls}\ncalls: {rig.calls()}\n"
                f"cycles: {(rig.home.logs / 'cycle-exits.tsv').read_text()}")
    finally:
        rig.teardown()
        mock.close()
