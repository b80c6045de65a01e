"""Claude Code as a crew: the launch ``fm crew spawn`` runs and the crew's own settings layer."""

from __future__ import annotations

import json
from pathlib import Path

from firstmate.api import CrewLaunchRequest
from firstmate_plugin_claude.hooks import plugin


def _request(tmp_path: Path) -> CrewLaunchRequest:
    return CrewLaunchRequest(crew="w1", cwd=tmp_path / "proj", home=tmp_path / "home",
                             brief="You are crew w1.\nTask: x", fm_argv=("/opt/fm/bin/fm",),
                             launch_dir=tmp_path / "launch", extra_args=("--model", "sonnet"))


def test_the_crew_starts_with_its_own_settings_and_the_brief(tmp_path: Path) -> None:
    request = _request(tmp_path)
    assert plugin.firstmate_crew_launch(harness="pi", request=request) is None
    launch = plugin.firstmate_crew_launch(harness="claude", request=request)
    assert launch is not None and launch.prompt == "argv"
    [settings] = launch.files
    assert launch.argv == ("claude", "--settings", str(tmp_path / "launch" / settings.path),
                           "--model", "sonnet", "You are crew w1.\nTask: x")
    assert "CLAUDECODE" in launch.unset_env and "CLAUDE_CODE_SESSION_ID" in launch.unset_env
    # The trust question is answered in the crew's window: the note names the command that
    # reaches it on the crews' own tmux server (FM_TMUX_SOCKET), not a bare tmux attach.
    assert any("fm crew attach w1" in note for note in launch.notes)
    assert not any("tmux attach" in note for note in launch.notes)
    doc = json.loads(settings.text)
    for event in ("Stop", "StopFailure"):
        [group] = doc["hooks"][event]
        [handler] = group["hooks"]
        assert handler["command"] == "/opt/fm/bin/fm crew turn-ended w1"
        assert handler["type"] == "command" and "asyncRewake" not in handler
    assert doc["permissions"]["allow"] == ["Bash(/opt/fm/bin/fm crew status w1:*)"]
    assert set(doc) == {"hooks", "permissions"}  # nothing else of the user's is overridden
