"""Pi as a crew: ``pi -e <crew extension> "<brief>"``, the extension recording turn ends."""

from __future__ import annotations

import json
from pathlib import Path

from firstmate.api import CrewLaunchRequest
from firstmate_plugin_pi.hooks import plugin


def test_the_crew_loads_its_own_extension_and_gets_the_brief(tmp_path: Path) -> None:
    request = CrewLaunchRequest(crew="w1", cwd=tmp_path, home=tmp_path / "home", brief="B",
                                fm_argv=("/opt/fm env/bin/fm",), launch_dir=tmp_path / "l",
                                extra_args=("--thinking", "off"))
    assert plugin.firstmate_crew_launch(harness="claude", request=request) is None
    launch = plugin.firstmate_crew_launch(harness="pi", request=request)
    assert launch is not None
    [extension] = launch.files
    assert launch.argv == ("pi", "-e", str(tmp_path / "l" / extension.path), "--thinking",
                           "off", "B")
    assert extension.path.endswith(".ts") and "__FM_TURN_ENDED_ARGV__" not in extension.text
    line = next(x for x in extension.text.splitlines() if x.startswith("const TURN_ENDED"))
    argv = json.loads(line.split("=", 1)[1].strip().rstrip(";"))
    assert argv == ["/opt/fm env/bin/fm", "crew", "turn-ended", "w1"]
    for event in ('"agent_end"', '"agent_settled"'):
        assert event in extension.text
    assert "registerTool" not in extension.text  # it only reports: no arm tool for the model


def test_pi_and_omp_load_one_crew_extension_shipped_by_the_core(tmp_path: Path) -> None:
    """One source for both harnesses of this extension API: the text differs only in its argv."""
    import importlib.util

    from firstmate.api import crew_extension

    request = CrewLaunchRequest(crew="w1", cwd=tmp_path, home=tmp_path / "home", brief="B",
                                fm_argv=("fm",), launch_dir=tmp_path / "l")
    launch = plugin.firstmate_crew_launch(harness="pi", request=request)
    assert launch is not None
    assert launch.files[0].text == crew_extension("pi", request.turn_ended_argv())
    assert importlib.util.find_spec("firstmate_plugin_pi.crew") is None  # no copy of its own
