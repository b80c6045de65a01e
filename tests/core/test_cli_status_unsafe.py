"""``fm status`` and ``fm away status`` on unsafe state: one line naming the fix, exit 4."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from firstmate.store.home import Home


def _fm(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FM_HOME": str(root)}
    return subprocess.run([sys.executable, "-m", "firstmate", *args], env=env, text=True,
                          capture_output=True, timeout=60, check=False)


@pytest.mark.parametrize("name", ["watch.lock", "beacon"])
def test_status_refuses_a_planted_link_in_state(tmp_path: Path, name: str) -> None:
    home = Home(tmp_path / "home").ensure()
    target = home.lock_path("watch") if name == "watch.lock" else home.beacon
    target.symlink_to(tmp_path / "elsewhere")
    done = _fm(home.root, "status")
    assert done.returncode == 4 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "refusing symlinked state path" in done.stderr
    assert not (tmp_path / "elsewhere").exists()  # never followed


@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["away", "status"]])
def test_a_state_path_that_is_a_file_is_unsafe_state(tmp_path: Path, command: list[str]) -> None:
    root = tmp_path / "home"
    root.mkdir()
    (root / "state").write_text("not a directory")
    done = _fm(root, *command)
    assert done.returncode == 4 and done.stdout == ""
    assert "exists but is not a directory; move it aside" in done.stderr
    assert (root / "state").read_text() == "not a directory"
