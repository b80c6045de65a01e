"""Install records are trusted state: ``fm doctor``, ``fm install`` and ``fm uninstall`` act only on
records ``fm install`` wrote for this home (authenticated with the home's secret, which lives
outside the home), never run a record's command through a shell, and read any content without a
traceback. Real ``fm`` processes in a cloned repository, real files."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from firstmate.testing import DEADLINE, fm_command


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No FM_HOME: the home is found from the working directory, as in a fresh clone."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FM_", "CLAUDE_", "FIRSTMATE_", "XDG_"))}
    env.update(HOME=str(tmp_path / "user"), FIRSTMATE_KEYS_DIR=str(tmp_path / "keys"),
               CLAUDE_CONFIG_DIR=str(tmp_path / "claude-config"), **extra)
    (tmp_path / "user").mkdir(exist_ok=True)
    return env


def fm(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(fm_command(*args), capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=DEADLINE * 4, check=False)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    return done


def findings(env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    done = fm(env, cwd, "doctor", "--json")
    assert done.returncode in (0, 1), done.stderr
    found: list[dict[str, Any]] = json.loads(done.stdout)["findings"]
    return found


def plant(clone: Path, harness: str, entries: list[dict[str, Any]]) -> Path:
    """A committed ``.firstmate/config/installs/<harness>.json`` in a cloned repository."""
    file = clone / ".firstmate" / "config" / "installs" / f"{harness}.json"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps({"installs": entries}))
    return file


def entry(project: Path, fm_command: str, **more: Any) -> dict[str, Any]:
    return {"project": str(project), "home": None, "fm_command": fm_command,
            "fm_command_given": True, "flags": {}, "at": 1.0, **more}


def hostile_commands(sentinel: Path) -> list[str]:
    return [f"touch {sentinel}; echo fm",                      # a shell line
            f"sh -c {shlex.quote(f'touch {sentinel}; echo fm')}",  # an argv that runs a shell
            f"/usr/bin/env touch {sentinel}"]                    # a plain argv


@pytest.mark.parametrize("which", range(3))
def test_a_cloned_install_record_runs_nothing_and_proposes_nothing(
        tmp_path: Path, which: int) -> None:
    clone = tmp_path / "clone"
    clone.mkdir()
    sentinel = tmp_path / "PWNED"
    command = hostile_commands(sentinel)[which]
    file = plant(clone, "claude", [entry(clone, command)])
    env = clean_env(tmp_path)
    found = findings(env, clone)
    assert not sentinel.exists(), "fm doctor ran a command from a cloned install record"
    for finding in found:
        assert str(sentinel) not in finding["fix"] + finding["detail"], finding
    about = [f for f in found if str(file) in f["detail"]]
    assert len(about) == 1 and about[0]["status"] == "warn", found
    assert "not written by fm install for this home" in about[0]["detail"]
    # Installing and uninstalling in the clone run nothing either, and drop the planted entry.
    done = fm(env, clone, "install", "claude")
    assert done.returncode == 0, done.stderr
    assert not sentinel.exists()
    assert [line for line in done.stderr.splitlines() if "dropped 1 entry" in line], done.stderr
    assert command not in file.read_text()
    assert fm(env, clone, "uninstall", "claude").returncode == 0
    assert not sentinel.exists()


def test_a_record_copied_from_another_home_of_yours_is_not_trusted(tmp_path: Path) -> None:
    sentinel = tmp_path / "PWNED"
    mine, clone = tmp_path / "mine", tmp_path / "clone"
    (mine / ".firstmate").mkdir(parents=True)
    clone.mkdir()
    env = clean_env(tmp_path)
    command = f"sh -c {shlex.quote(f'touch {sentinel}; echo fm')}"
    assert fm(env, mine, "install", "claude", "--fm-command", command).returncode == 0
    assert not sentinel.exists()
    # The file, byte for byte, in another home: the secret that made it is not that home's.
    record = (mine / ".firstmate" / "config" / "installs" / "claude.json").read_bytes()
    planted = plant(clone, "claude", [])
    planted.write_bytes(record)
    done = fm(env, clone, "doctor", "--json", "--project", str(mine))
    assert not sentinel.exists(), "a record from another home ran"
    about = [f for f in json.loads(done.stdout)["findings"] if str(planted) in f["detail"]]
    assert len(about) == 1 and about[0]["status"] == "warn", done.stdout


def test_doctor_runs_an_authenticated_command_as_an_argv_never_through_a_shell(
        tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    sentinel = tmp_path / "SUBSTITUTED"
    env = clean_env(tmp_path, FM_HOME=str(tmp_path / "home"))
    # The user's own command; the hooks get its words quoted, so no shell ever expands them.
    command = f"{shlex.join(fm_command())} $(touch {sentinel})"
    assert fm(env, project, "install", "claude", "--fm-command", command).returncode == 0
    found = [f for f in findings(env, project) if f["check"] == "harness-config"]
    assert not sentinel.exists(), "doctor passed the recorded command to a shell"
    failing = [f for f in found if f["status"] == "fail"]
    assert len(failing) == 1 and "cannot start" in failing[0]["detail"], found
    # A plain recorded command, run the same way, starts.
    good = shlex.join(fm_command())
    assert fm(env, project, "install", "claude", "--fm-command", good).returncode == 0
    assert all(f["status"] != "fail" for f in findings(env, project)), findings(env, project)


@pytest.mark.parametrize("content", [
    '{"installs": [{"project": "P", "fm_command": "fm", "at": 1' + "0" * 400 + "}]}",
    '{"installs": [{"project": "P", "fm_command": "fm", "at": 1e999}]}',
    '{"installs": [{"project": "P", "fm_command": "fm", "at": NaN}]}',
    '{"installs": ' + "[" * 100_000 + "]" * 100_000 + "}",
    '{"installs": [{"project": "P", "fm_command": "fm", "flags": {"x": 1' + "0" * 5000 + "}}]}",
])
def test_any_record_content_is_one_line_or_ignored(tmp_path: Path, content: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    home = tmp_path / "home"
    env = clean_env(tmp_path, FM_HOME=str(home))
    assert fm(env, project, "install", "claude").returncode == 0
    file = home / "config" / "installs" / "claude.json"
    file.write_text(content.replace('"P"', json.dumps(str(project))))
    findings(env, project)
    for verb in ("install", "uninstall", "install"):
        done = fm(env, project, verb, "claude")
        assert done.returncode == 0, done.stderr
    # The install that knows the truth replaced what could not be trusted.
    assert [e["project"] for e in json.loads(file.read_text())["installs"]] == [str(project)]
    assert all(f["status"] == "ok" for f in findings(env, project)
               if f["check"] == "harness-config"), findings(env, project)
