"""``fm install claude`` writes hooks that run wherever Claude Code runs, and ``fm doctor`` checks
them with the options they were installed with: real ``fm`` processes, real files."""

from __future__ import annotations

import json
import os
import re
import shlex
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


def follow(fix: str, env: dict[str, str], cwd: Path) -> None:
    """Run a printed fix as a shell user would, ``fm`` being this fm."""
    ours = " ".join(shlex.quote(word) for word in fm_command())
    # Every command of the line that is fm (the first, and one after &&) is this fm.
    line = re.sub(r"(^|&& )fm ", lambda m: f"{m.group(1)}{ours} ", fix)
    done = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=DEADLINE * 4, check=False)
    assert done.returncode == 0, (fix, done.stderr)


def one_verdict(found: list[dict[str, Any]]) -> None:
    """No install is both ok and failing: one claude line says ok, or none does."""
    claude = [f for f in found if f["detail"].startswith("claude:")]
    assert not (any(f["status"] == "ok" for f in claude)
                and any(f["status"] != "ok" for f in claude)), claude


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
    found = claude_config(env, project)
    one_verdict(found)
    warned = [f for f in found if f["status"] != "ok"]
    # One line, the one that says why (not also a generic "not current" with the same fix).
    assert len(warned) == 1 and "the settings file the project commits" in warned[0]["detail"]
    moved = warned
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
    found = claude_config(env, project)
    one_verdict(found)
    failing = [f for f in found if f["status"] == "fail"]
    assert len(failing) == 1 and f"{gone} does not exist" in failing[0]["detail"], failing
    assert "deleted or moved" in failing[0]["detail"]
    # The fix writes this installation's own entry point: --fm-command is what broke.
    assert failing[0]["fix"] == f"fm install claude --project {project}" and failing[0]["safe"]
    assert fm(env, project, "doctor").returncode == 1
    follow(failing[0]["fix"], env, project)
    after = claude_config(env, project)
    assert after and {f["status"] for f in after} == {"ok"}, after


def test_a_project_installed_without_a_record_is_named_not_guessed(
    rig: tuple[dict[str, str], Path, Path]
) -> None:
    env, project, home = rig
    assert fm(env, project, "install", "claude", "--project", str(project)).returncode == 0
    (home / "config" / "installs" / "claude.json").unlink()
    found = [f for f in claude_config(env, project) if f["status"] != "ok"]
    assert len(found) == 1 and "fm has no record of how" in found[0]["detail"], found
    # The fix is a command (not "rerun the command you used"): the install that finds
    # nothing to change.
    assert found[0]["fix"] == f"fm install claude --project {project}"
    follow(found[0]["fix"], env, project)
    assert all(f["status"] == "ok" for f in claude_config(env, project))


def test_a_project_moved_on_disk_is_named_and_its_options_kept(
    rig: tuple[dict[str, str], Path, Path], tmp_path: Path
) -> None:
    env, project, _ = rig
    assert fm(env, project, "install", "claude", "--project", str(project), "--local"
              ).returncode == 0
    moved = tmp_path / "moved"
    project.rename(moved)
    found = [f for f in claude_config(env, moved) if f["status"] != "ok"]
    assert len(found) == 1, found
    assert f"recorded for {project}, which no longer exists" in found[0]["detail"]
    assert "older fm" not in found[0]["detail"]
    assert found[0]["fix"] == f"fm install claude --project {moved} --local"
    follow(found[0]["fix"], env, moved)
    assert all(f["status"] == "ok" for f in claude_config(env, moved))


@pytest.mark.parametrize("name", ["settings.local.json", "settings.json"])
def test_a_settings_file_fm_cannot_read_is_moved_aside_by_the_fix(
    rig: tuple[dict[str, str], Path, Path], name: str
) -> None:
    env, project, _ = rig
    assert fm(env, project, "install", "claude", "--project", str(project)).returncode == 0
    broken = project / ".claude" / name
    broken.write_text('{"hooks": ')
    # What the dry run says is the error again; the fix is not a dry run.
    (line,) = [f for f in claude_config(env, project) if f["status"] != "ok"]
    assert line["status"] == "fail" and f"{broken} is not valid JSON" in line["detail"]
    assert line["fix"] == (f"mv -- {broken} {broken}.broken && fm install claude --project "
                           f"{project}")
    # It moves a file of the user's: never applied by --fix.
    assert not line["safe"]
    done = fm(env, project, "doctor", "--fix")
    assert broken.read_text() == '{"hooks": ' and "nothing to apply" in done.stdout
    follow(line["fix"], env, project)
    assert (project / ".claude" / f"{name}.broken").exists()
    assert all(f["status"] == "ok" for f in claude_config(env, project))


def test_doctor_fix_applies_the_safe_fixes_and_says_what_it_did(
    rig: tuple[dict[str, str], Path, Path], tmp_path: Path
) -> None:
    env, project, _ = rig
    gone = tmp_path / "gone-venv" / "bin" / "fm"
    assert fm(env, project, "install", "claude", "--project", str(project),
              "--fm-command", str(gone)).returncode == 0
    done = fm(env, project, "doctor", "--fix")
    assert "Traceback" not in done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"fix   harness-config  fm install claude --project {project}  → "
                            "done: ")
    assert str(gone) not in stop_command(project)
    assert all(f["status"] == "ok" for f in claude_config(env, project))
    as_json = json.loads(fm(env, project, "doctor", "--fix", "--json").stdout)
    assert as_json["applied"] == [] and as_json["findings"]
    # With --json too, the findings are those of the home the fixes left.
    assert fm(env, project, "install", "claude", "--project", str(project),
              "--fm-command", str(gone)).returncode == 0
    as_json = json.loads(fm(env, project, "doctor", "--fix", "--json").stdout)
    assert [done["ok"] for done in as_json["applied"]] == [True]
    config = [f for f in as_json["findings"] if f["check"] == "harness-config"
              and f["detail"].startswith("claude:")]
    assert config and all(f["status"] == "ok" for f in config) and not as_json["failed"]


def test_records_no_home_of_this_project_can_use_are_removed_by_the_fix(
    rig: tuple[dict[str, str], Path, Path], tmp_path: Path
) -> None:
    env, project, home = rig
    records = home / "config" / "installs" / "claude.json"
    records.parent.mkdir(parents=True)
    # Copied from another home: nothing in it verifies here, and no install is in this project.
    records.write_text(json.dumps({"installs": [{"project": "/elsewhere", "fm_command": "/x/fm",
                                                 "mac": "00" * 32}]}))
    (line,) = [f for f in claude_config(env, project) if f["status"] != "ok"]
    assert line["fix"] == f"rm -- {records}" and line["safe"]
    done = fm(env, project, "doctor", "--fix")
    assert f"→ done: removed {records}" in done.stdout and not records.exists()
    assert all(f["status"] == "ok" for f in claude_config(env, project))


def test_the_harness_program_is_looked_up_on_path_never_run(
    rig: tuple[dict[str, str], Path, Path], tmp_path: Path
) -> None:
    env, project, _ = rig
    assert fm(env, project, "install", "claude", "--project", str(project)).returncode == 0
    bare = {**env, "PATH": "/usr/bin:/bin"}
    done = json.loads(fm(bare, project, "doctor", "--json").stdout)
    (line,) = [f for f in done["findings"] if f["check"] == "harness"]
    assert line["status"] == "warn" and "no program named claude is on PATH" in line["detail"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ran = tmp_path / "ran"
    (bin_dir / "claude").write_text(f"#!/bin/sh\ntouch {ran}\n")
    (bin_dir / "claude").chmod(0o755)
    done = json.loads(fm({**bare, "PATH": f"{bin_dir}:/usr/bin:/bin"}, project, "doctor",
                         "--json").stdout)
    (line,) = [f for f in done["findings"] if f["check"] == "harness"]
    assert line == {"check": "harness", "status": "ok", "detail": f"claude: {bin_dir}/claude",
                    "fix": "", "safe": False}
    assert not ran.exists()
