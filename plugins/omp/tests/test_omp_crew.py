"""omp as a crew: ``omp -e <crew extension> "<brief>"``, the extension recording turn ends."""

from __future__ import annotations

import json
from pathlib import Path

from firstmate.api import CrewLaunchRequest
from firstmate_plugin_omp.hooks import plugin


def test_the_crew_loads_its_own_extension_and_gets_the_brief(tmp_path: Path) -> None:
    request = CrewLaunchRequest(crew="w1", cwd=tmp_path, home=tmp_path / "home", brief="B",
                                fm_argv=("/opt/fm/bin/fm",), launch_dir=tmp_path / "l",
                                extra_args=("--model", "m"))
    assert plugin.firstmate_crew_launch(harness="pi", request=request) is None
    launch = plugin.firstmate_crew_launch(harness="omp", request=request)
    assert launch is not None and launch.notes
    assert "fm crew attach w1" in launch.notes[0] and "{setupWizard: false}" in launch.notes[0]
    [extension] = launch.files
    assert launch.argv == ("omp", "-e", str(tmp_path / "l" / extension.path), "--model", "m",
                           "B")
    assert "__FM_TURN_ENDED_ARGV__" not in extension.text
    line = next(x for x in extension.text.splitlines() if x.startswith("const TURN_ENDED"))
    assert json.loads(line.split("=", 1)[1].strip().rstrip(";")) == [
        "/opt/fm/bin/fm", "crew", "turn-ended", "w1"]
    assert '"agent_end"' in extension.text and "registerTool" not in extension.text
