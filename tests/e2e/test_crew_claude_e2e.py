"""End to end: ``fm crew spawn`` starts the real Claude Code (npm ``@anthropic-ai/claude-code``)
as a crew in a tmux window, against a loopback mock model API, while the primary's real
``fm arm`` watches the same home.

The project has the primary's own Claude hooks (``fm install claude``) and the crew works in that
very directory, so the crew's session loads them: they must stay inert there. The mock answers
the crew's brief with a Bash tool call running the status command the brief names. Then:

- the crew's status line reaches the log (the crew's settings allow its reports without a
  permission prompt), and its own Stop hook records the turn end;
- the primary's watcher closes with the crew's status line or its turn end;
- the crew's session never armed a watcher: no ``fm arm``/``fm watch`` with its ``FM_CREW``, and
  every cycle in the cycle log is the primary's arm's.

The npm install is cached under ``.e2e-cache/``. Skips without node/npm or tmux.
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

from crew_rig import DEADLINE, CrewRig, ToolMock
from test_claude_e2e import claude_bin

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                       reason="node/npm are not installed: the real Claude Code cannot run"),
    pytest.mark.skipif(shutil.which("tmux") is None,
                       reason="tmux is not installed: crews run in tmux windows"),
    pytest.mark.timeout(300),
]


def test_a_spawned_claude_crew_reports_and_the_primary_wakes(tmp_path: Path) -> None:
    claude = claude_bin()
    note = f"E2E-CREW-{uuid.uuid4().hex[:8]}"
    mock = ToolMock(note).start()
    rig = CrewRig(tmp_path)
    rig.setup([str(REPO / "core"), str(REPO / "plugins" / "claude" / "src")], [claude.parent], {
        "ANTHROPIC_BASE_URL": mock.root, "ANTHROPIC_API_KEY": "sk-dummy",
        "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
    (rig.user / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True, "theme": "dark",
        "projects": {str(rig.project): {"hasTrustDialogAccepted": True}},
        "customApiKeyResponses": {"approved": ["sk-dummy"], "rejected": []}}))
    try:
        installed = rig.fm("install", "claude", "--project", str(rig.project),
                           "--fm-command", str(rig.fm_wrapper))
        assert installed.returncode == 0, installed.stderr
        arm = rig.arm_primary()
        out = rig.spawn("builder", "claude", "Say hello, then report done.")
        assert "spawned builder (claude)" in out

        diag = lambda: f"{rig.diag('builder')}\nrequests:\n{mock.describe()}"  # noqa: E731
        reason = arm.wait_reason(deadline=60)
        assert reason.startswith("signal: builder."), f"{reason}\n{diag()}"
        assert note in reason or reason.startswith("signal: builder.turn-ended"), reason
        # The model's tool call ran the brief's status command without a permission prompt.
        status = rig.home.crew_dir / "builder.status"
        eventually("the crew's status line",
                   lambda: status.exists() and f"done: {note}" in status.read_text(),
                   deadline=DEADLINE, diag=diag)
        assert mock.tool_calls and mock.tool_calls[0].startswith(str(rig.fm_wrapper))
        # The crew's own Stop hook recorded the turn end, through the same fm wrapper.
        eventually("the crew's turn-end marker",
                   lambda: (rig.home.crew_dir / "builder.turn-ended").exists(),
                   deadline=DEADLINE, diag=diag)
        calls = [args for _pid, crew, args in rig.calls() if crew == "builder"]
        assert "crew turn-ended builder" in calls, calls
        # The primary's own hooks ran in the crew's session too (same project), and stayed inert.
        assert any(args.startswith("hook claude") for args in calls), calls
        # The primary handles the wake: the drain presents the crew's report.
        assert f"done: {note}" in rig.handle_wake()
        # A second, plain turn (steered in, no report) wakes the primary with its turn end.
        second = rig.steered_turn_wakes("builder", diag)
        rig.assert_crew_never_armed("builder")
        with contextlib.suppress(OSError):
            (tmp_path.parent / "crew-claude-e2e-evidence.txt").write_text(
                f"reason: {reason}\nsecond: {second}\ntool call: {mock.tool_calls}\ncalls: {rig.calls()}\n"
                f"cycles: {(rig.home.logs / 'cycle-exits.tsv').read_text()}")
        listed = json.loads(rig.fm("crew", "list", "--json").stdout)["crews"]
        assert [(e["name"], e["harness"], e["pane_state"]) for e in listed] == [
            ("builder", "claude", "live")]
    finally:
        rig.teardown()
        mock.close()
