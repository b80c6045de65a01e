"""What a person is told brings a down watcher back (``fm status``, ``fm top``): start or restart
the harness set up for the home, never ``fm arm``, which holds their shell until the next wake
and which the model in that harness is told never to run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from firstmate.app.top import Gatherer
from firstmate.app.top_view import render
from firstmate.cli.status import render as status_text
from firstmate.fast import rearmadvice
from firstmate.testing import DEADLINE, fm_command


def project_home(tmp_path: Path, *harnesses: str) -> Path:
    """A project's home, with the install records fm install leaves for *harnesses*."""
    root = tmp_path / "project" / ".firstmate"
    (root / "config" / "installs").mkdir(parents=True)
    for name in harnesses:
        (root / "config" / "installs" / f"{name}.json").write_text("{}")
    return root


def status_line(root: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    done = subprocess.run(fm_command("status"), env={**env, "FM_HOME": str(root)},
                          capture_output=True, text=True, timeout=DEADLINE, check=False)
    assert done.returncode == 0, done.stderr
    return next(line for line in done.stdout.splitlines() if line.startswith("watcher:"))


def test_status_names_the_harness_set_up_here(tmp_path: Path) -> None:
    root = project_home(tmp_path, "claude")
    line = status_line(root)
    assert line == f"watcher: none (start or restart claude in {root.parent})"
    two = project_home(tmp_path / "b", "claude", "codex")
    assert "start or restart the harness you supervise with (claude or codex)" in \
        status_line(two)


def test_status_without_a_harness_names_a_command_that_returns(tmp_path: Path) -> None:
    line = status_line(project_home(tmp_path))
    assert "fm arm" not in line
    assert "fm install <harness>" in line and "fm checkpoint --seconds 60" in line


def test_a_stale_beacon_line_names_a_command_that_returns() -> None:
    line = status_text({"home": "/nowhere/.firstmate", "watcher": {
        "healthy": False, "state": "stale-beacon", "pid": 42, "beacon_age": 900.0,
        "grace": 300.0}, "queue": {"depth": 0}, "episode": None,
        "session_lock": {"state": "free"}}).splitlines()[1]
    assert "fm arm --take-over" not in line and "end it now with fm arm --stop" in line


def test_top_says_the_same(tmp_path: Path) -> None:
    root = project_home(tmp_path, "claude")
    gatherer = Gatherer(root, {"FM_HOME": str(root)})
    (root / "state").mkdir(mode=0o700)
    try:
        frame = gatherer.gather()
    finally:
        gatherer.close()
    assert frame.restart == f"start or restart claude in {root.parent}"
    text = "\n".join(render(frame, 120))
    assert "none  (start or restart claude in" in text and "fm arm" not in text


def test_the_default_home_serves_every_project() -> None:
    assert rearmadvice.project_of(os.path.expanduser("~/.firstmate")) == "this project"
    assert rearmadvice.how("hook", "stop") == "its Stop hook starts the watcher when a turn ends"
    assert rearmadvice.how("checkpoint") == ""  # (no command declared: nothing to name)
