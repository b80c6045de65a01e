"""``fm install claude`` writes hooks that run wherever Claude Code runs, and ``fm doctor`` checks
them with the options they were installed with: real ``fm`` processes, real files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from firstmate.testing import DEADLINE, fm_command

STOP = json.dumps({"session_id": "s-1", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp",
                   "permission_mode": "default", "hook_event_name": "Stop",
                   "stop_hook_active": False, "last_assistant_message": "done"})


def fm(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(fm_command(*args), capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=DEADLINE * 4, check=False)


@pytest.fixture
def rig(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FM_", "CLAUDE_"))}
    env.update(FM_HOME=str(home), CLAUDE_CONFIG_DIR=str(tmp_path / "claude-config"),
               FIRSTMATE_KEYS_DIR=str(tmp_path / "keys"))
    return env, project, home


def claude_config(env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    done = fm(env, cwd, "doctor", "--json")
    assert "Traceback" not in done.stderr, done.stderr
    return [f for f in json.loads(done.stdout)["findings"] if f["check"] == "harness-config"]


def stop_command(project: Path, name: str = "settings.local.json") -> str:
    doc = json.loads((project / ".claude" / name).read_text())
    command: str = doc["hooks"]["Stop"][0]["hooks"][0]["command"]
    return command


def test_installed_hooks_run_without_fm_on_the_path(rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, home = rig
    assert fm(env, project, "install", "claude", "--project", str(project)).returncode == 0
    command = stop_command(project)
    assert os.path.isabs(command.split()[0]), command
    # As a harness started from a desktop launcher runs it: a shell with a bare system PATH.
    bare = {"PATH": "/usr/bin:/bin", "HOME": env.get("HOME", "/root"), "FM_HOME": str(home),
            "FIRSTMATE_KEYS_DIR": env["FIRSTMATE_KEYS_DIR"]}
    if "PYTHONPATH" in env:  # (a checkout run: the interpreter finds the code the same way)
        bare["PYTHONPATH"] = env["PYTHONPATH"]
    assert shutil.which("fm", path=bare["PATH"]) is None
    done = subprocess.run(["/bin/sh", "-c", command], input=STOP, capture_output=True, text=True,
                          env=bare, cwd=project, timeout=DEADLINE * 4, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    # What a bare `fm` did in the same place.
    plain = subprocess.run(["/bin/sh", "-c", "fm hook claude stop"], input=STOP, env=bare,
                           capture_output=True, text=True, timeout=DEADLINE, check=False)
    assert plain.returncode == 127


def test_doctor_checks_with_the_recorded_options_and_offers_only_that_command(
    rig: tuple[dict[str, str], Path, Path], tmp_path: Path
) -> None:
    env, project, _ = rig
    pinned = tmp_path / "pinned-home"
    args = ("install", "claude", "--project", str(project), "--home", str(pinned), "--local")
    assert fm(env, project, *args).returncode == 0
    found = claude_config(env, project)
    claude = [f for f in found if f["detail"].startswith("claude:")]
    assert [f["status"] for f in claude] == ["ok"], found
    assert claude[0]["detail"] == "claude: installed and current"
    # No warning about harnesses this project never set up: at most one line lists them.
    assert all(f["status"] == "ok" for f in found), found
    # The user edits the hooks away: the fix is the install they made, every option kept.
    local = project / ".claude" / "settings.local.json"
    doc = json.loads(local.read_text())
    del doc["hooks"]["Stop"]
    local.write_text(json.dumps(doc))
    stale = [f for f in claude_config(env, project) if f["status"] != "ok"]
    assert len(stale) == 1 and "not current" in stale[0]["detail"], stale
    assert stale[0]["fix"] == (f"fm install claude --project {project} --home {pinned} --local")
    done = subprocess.run(["/bin/sh", "-c", stale[0]["fix"].replace("fm ", " ".join(
        fm_command()) + " ", 1)], capture_output=True, text=True, env=env, cwd=project,
        timeout=DEADLINE * 4, check=False)
    assert done.returncode == 0, done.stderr
    assert not (project / ".claude" / "settings.json").exists()  # the fix doubled nothing
    assert all(f["status"] == "ok" for f in claude_config(env, project))


def test_doctor_finds_hooks_an_older_fm_left_in_the_committed_settings(
        rig: tuple[dict[str, str], Path, Path]) -> None:
    env, project, _ = rig
    assert fm(env, project, "install", "claude", "--project", str(project)).returncode == 0
    # An older fm wrote them into the settings the project commits, with this machine's path.
    shared = project / ".claude" / "settings.json"
    shared.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [
        {"type": "command", "command": f"{stop_command(project).split()[0]} hook claude stop",
         "asyncRewake": True, "timeout": 28800}]}]}}, indent=2))
    warned = [f for f in claude_config(env, project) if f["status"] == "warn"]
    moved = [f for f in warned if "the settings file the project commits" in f["detail"]]
    assert len(moved) == 1, warned
    assert moved[0]["fix"] == f"fm install claude --project {project}"
    done = subprocess.run(["/bin/sh", "-c", moved[0]["fix"].replace("fm ", " ".join(
        fm_command()) + " ", 1)], capture_output=True, text=True, env=env, cwd=project,
        timeout=DEADLINE * 4, check=False)
    assert done.returncode == 0, done.stderr
    assert not shared.exists()  # it held nothing of the user's
    assert all(f["status"] == "ok" for f in claude_config(env, project))


def test_doctor_finds_the_claude_plugin_enabled_beside_the_settings_hooks(
    rig: tuple[dict[str, str], Path, Path]
) -> None:
    env, project, _ = rig
    assert fm(env, project, "install", "claude", "--project", str(project)).returncode == 0
    config = Path(env["CLAUDE_CONFIG_DIR"])
    config.mkdir()
    (config / "settings.json").write_text(json.dumps(
        {"enabledPlugins": {"firstmate@firstmate": True}}))
    found = [f for f in claude_config(env, project) if f["status"] == "warn"]
    assert len(found) == 1 and "plugin for Claude Code is enabled" in found[0]["detail"], found
    assert found[0]["fix"].startswith(f"fm uninstall claude --project {project}")


def test_doctor_fails_a_hook_command_that_cannot_start(
    rig: tuple[dict[str, str], Path, Path], tmp_path: Path
) -> None:
    env, project, _ = rig
    gone = tmp_path / "moved-venv" / "bin" / "fm"
    assert fm(env, project, "install", "claude", "--project", str(project),
              "--fm-command", str(gone)).returncode == 0
    failing = [f for f in claude_config(env, project) if f["status"] == "fail"]
    assert len(failing) == 1 and "cannot start" in failing[0]["detail"], failing
    # The fix writes this installation's own entry point: --fm-command is what broke.
    assert failing[0]["fix"] == f"fm install claude --project {project}"
    assert fm(env, project, "doctor").returncode == 1


def test_a_project_installed_without_a_record_is_named_not_guessed(
    rig: tuple[dict[str, str], Path, Path]
) -> None:
    env, project, home = rig
    assert fm(env, project, "install", "claude", "--project", str(project)).returncode == 0
    (home / "config" / "installs" / "claude.json").unlink()
    found = [f for f in claude_config(env, project) if f["status"] != "ok"]
    assert len(found) == 1 and "no record of its options" in found[0]["detail"], found
