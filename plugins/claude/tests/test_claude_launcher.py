"""The Claude Code plugin's hook launcher (``bin/firstmate-hook``), run as a real ``sh`` process:
where it looks for ``fm``, in what order, and what it says when there is none."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from firstmate_plugin_claude.hooks import plugin_dir

LAUNCHER = plugin_dir() / "bin" / "firstmate-hook"
VENV = Path("venvs/firstmate-plugin-claude/bin/fm")
CAT = shutil.which("cat") or "/bin/cat"
MISSING = ("firstmate: no fm found (FIRSTMATE_FM, PATH, pipx); install it with: "
           "pipx install --include-deps firstmate-plugin-claude\n")


def fake_fm(path: Path, name: str, status: int = 0) -> Path:
    """An executable that records who it is, its arguments and its stdin, then exits *status*."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Absolute cat: the launcher runs with a PATH that holds only what a test puts there.
    path.write_text(f'#!/bin/sh\nprintf \'%s\\n\' "{name} $*" >&2\n{CAT}\nexit {status}\n')
    path.chmod(0o755)
    return path


def run(tmp_path: Path, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    base = {"HOME": str(tmp_path / "home"), "PATH": str(tmp_path / "empty")}
    return subprocess.run([str(LAUNCHER), *args], input=stdin, capture_output=True, text=True,
                          env={**base, **env}, timeout=30, check=False)


def test_the_launcher_ships_executable() -> None:
    assert LAUNCHER.is_file() and os.access(LAUNCHER, os.X_OK)
    assert LAUNCHER.read_text().startswith("#!/bin/sh\n")


def test_no_fm_anywhere_is_one_line_and_exit_0(tmp_path: Path) -> None:
    done = run(tmp_path, "claude", "stop", stdin='{"session_id": "s"}')
    assert (done.returncode, done.stdout, done.stderr) == (0, "", MISSING)


def test_fm_on_path_gets_hook_and_the_arguments_stdin_and_status(tmp_path: Path) -> None:
    fake_fm(tmp_path / "bin" / "fm", "path-fm", status=2)
    done = run(tmp_path, "claude", "stop", stdin="PAYLOAD", PATH=str(tmp_path / "bin"))
    # Exit 2 and stderr pass through untouched: that is how the Stop hook wakes Claude.
    assert (done.returncode, done.stdout, done.stderr) == (2, "PAYLOAD", "path-fm hook claude stop\n")


@pytest.mark.parametrize("place", ["local-bin", "pipx-home", "custom-pipx-home", "old-pipx", "app"])
def test_pipx_places_in_order(tmp_path: Path, place: str) -> None:
    home = tmp_path / "home"
    places = {
        "local-bin": home / ".local" / "bin" / "fm",
        "pipx-home": home / ".local" / "share" / "pipx" / VENV,
        "custom-pipx-home": tmp_path / "pipx" / VENV,
        "old-pipx": home / ".local" / "pipx" / VENV,
        "app": tmp_path / "apps" / "firstmate-claude",
    }
    order = list(places)
    env = {"PIPX_HOME": str(tmp_path / "pipx"), "PATH": str(tmp_path / "apps")}
    # Every place from this one on holds an fm: the launcher must pick this one.
    for name in order[order.index(place):]:
        if name == "pipx-home":
            continue  # PIPX_HOME is set: the default pipx home is not looked at
        fake_fm(places[name], name)
    if place == "pipx-home":
        fake_fm(places[place], place)
        env.pop("PIPX_HOME")
    done = run(tmp_path, "claude", "session-start", **env)
    assert (done.returncode, done.stderr) == (0, f"{place} hook claude session-start\n")


def test_firstmate_fm_wins_and_a_broken_one_is_passed_over(tmp_path: Path) -> None:
    fake_fm(tmp_path / "bin" / "fm", "path-fm")
    pinned = fake_fm(tmp_path / "pinned" / "fm", "pinned-fm")
    done = run(tmp_path, "claude", "stop", PATH=str(tmp_path / "bin"), FIRSTMATE_FM=str(pinned))
    assert done.stderr == "pinned-fm hook claude stop\n"
    pinned.chmod(0o644)
    done = run(tmp_path, "claude", "stop", PATH=str(tmp_path / "bin"), FIRSTMATE_FM=str(pinned))
    assert done.stderr == "path-fm hook claude stop\n"
    (tmp_path / "dir-on-path" / "fm").mkdir(parents=True)
    done = run(tmp_path, "claude", "stop", PATH=f"{tmp_path / 'dir-on-path'}:{tmp_path / 'bin'}")
    assert done.stderr == "path-fm hook claude stop\n"


def test_the_real_fm_runs_the_hook(tmp_path: Path) -> None:
    """Through to the real ``fm hook claude session-start``: with no home set up it stays
    silent and exits 0, as every hook of an unsupervised project does."""
    fm = tmp_path / "bin" / "fm"
    fm.parent.mkdir()
    fm.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m firstmate "$@"\n')
    fm.chmod(0o755)
    project = tmp_path / "project"
    project.mkdir()
    payload = ('{"session_id": "s", "hook_event_name": "SessionStart", "source": "startup", '
               f'"cwd": "{project}"}}')
    done = run(tmp_path, "claude", "session-start", stdin=payload, PATH=str(fm.parent),
               FM_HOME=str(tmp_path / "fmhome"), CLAUDE_PROJECT_DIR=str(project),
               PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
