"""Codex as a crew: its ``notify`` program, set for the crew's session alone, records turn ends."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from firstmate.api import CrewLaunchRequest
from firstmate_plugin_codex.hooks import plugin


def _request(tmp_path: Path, fm: str) -> CrewLaunchRequest:
    return CrewLaunchRequest(crew="w1", cwd=tmp_path, home=tmp_path / "home", brief="B",
                             fm_argv=(fm,), launch_dir=tmp_path / "l", extra_args=("-m", "x"))


def test_the_crew_notify_runs_turn_ended_and_ignores_codex_json(tmp_path: Path) -> None:
    recorder = tmp_path / "fm dir" / "fm"
    recorder.parent.mkdir()
    log = tmp_path / "calls"
    recorder.write_text(f'#!/bin/sh\necho "$#:$*" >> "{log}"\n')
    recorder.chmod(0o755)
    request = _request(tmp_path, str(recorder))
    assert plugin.firstmate_crew_launch(harness="claude", request=request) is None
    launch = plugin.firstmate_crew_launch(harness="codex", request=request)
    assert launch is not None and not launch.files and "CODEX_SANDBOX" in launch.unset_env
    assert any("fm crew attach w1" in note for note in launch.notes)
    assert not any("tmux attach" in note for note in launch.notes)
    argv = list(launch.argv)
    assert argv[:3] == ["codex", "--no-daemon", "-c"] and argv[-3:] == ["-m", "x", "B"]
    assert argv[argv.index("--add-dir") + 1] == str(tmp_path / "home")
    key, value = argv[3].split("=", 1)
    assert key == "notify"
    notify = json.loads(value)  # a JSON array of strings is also the TOML Codex parses
    # Codex appends one JSON argument; the crew's command leaves it aside.
    subprocess.run([*notify, json.dumps({"type": "agent-turn-complete"})], check=True, timeout=30)
    assert log.read_text() == "3:crew turn-ended w1\n"
