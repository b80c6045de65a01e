"""What ``fm install`` writes into hooks (firstmate.plugin.fmcommand) and what it records for
``fm doctor`` (firstmate.plugin.installrecord)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from firstmate.plugin import fmcommand, installrecord
from firstmate.plugin.harness import InstallOptions
from firstmate.store.home import Home


def fake_env(tmp_path: Path, script: bytes | None, mode: int = 0o755) -> str:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    if script is not None:
        (bin_dir / "fm").write_bytes(script)
        (bin_dir / "fm").chmod(mode)
    return str(bin_dir / "python")


def test_the_own_fm_script_is_used_by_absolute_path(tmp_path: Path) -> None:
    python = fake_env(tmp_path, b"#!/x/python\nfrom firstmate.cli.main import main\n")
    assert fmcommand.own_argv(python) == [str(tmp_path / "venv" / "bin" / "fm")]


@pytest.mark.parametrize(("script", "mode"), [(None, 0o755), (b"#!/bin/sh\necho another fm\n", 0o755),
                                              (b"from firstmate.cli.main import main\n", 0o644)])
def test_without_our_script_the_interpreter_runs_the_package(
    tmp_path: Path, script: bytes | None, mode: int
) -> None:
    python = fake_env(tmp_path, script, mode)
    # -P: the hooks run in the project directory, whose own firstmate/ must never be imported.
    assert fmcommand.own_argv(python) == [python, "-P", "-m", "firstmate"]
    assert fmcommand.own_command(python) == f"{python} -P -m firstmate"


def test_this_installation_answers_through_its_own_command() -> None:
    done = subprocess.run(["/bin/sh", "-c", f"{fmcommand.own_command()} --version"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.startswith("fm "), done.stderr
    # The environment's own path, never a resolved symlink out of it.
    assert fmcommand.own_argv()[0].startswith(os.path.dirname(os.path.abspath(sys.executable)))


def opts(project: Path, **flags: str) -> InstallOptions:
    return InstallOptions("acme", project, home=None, fm_command="/venv/bin/fm", flags=flags)


def test_records_round_trip_per_project_and_flags(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    a, b = tmp_path / "a", tmp_path / "b"
    installrecord.remember(home, opts(a), fm_command_given=False)
    installrecord.remember(home, opts(a, local="true"), fm_command_given=True)
    installrecord.remember(home, opts(b), fm_command_given=False)
    installrecord.remember(home, opts(b), fm_command_given=False)  # the same install again
    assert len(installrecord.read(home, "acme")) == 3
    newest, older = installrecord.for_project(home, "acme", a)
    assert newest.flags == (("local", "true"),) and older.flags == ()
    assert newest.command() == f"fm install acme --project {a} --fm-command /venv/bin/fm --local"
    assert older.command("uninstall") == f"fm uninstall acme --project {a}"
    assert newest.options(dry_run=True) == InstallOptions(
        "acme", a, None, True, "/venv/bin/fm", {"local": "true"})
    # After an uninstall only the installs that are gone are dropped.
    installrecord.prune(home, "acme", a, lambda record: record.flags == ())
    assert [r.flags for r in installrecord.for_project(home, "acme", a)] == [()]
    installrecord.prune(home, "acme", b, lambda record: False)
    installrecord.prune(home, "acme", a, lambda record: False)
    assert not installrecord.path(home, "acme").exists()


@pytest.mark.parametrize("content", [b"{", b"[]", b'{"installs": [{"project": 3}]}',
                                     b'{"installs": [{"project": "/p", "fm_command": " "}]}',
                                     b'{"installs": [{"project": "/p", "fm_command": "fm", "flags": [1]}]}',
                                     b"\xff"])
def test_a_damaged_record_is_named_never_trusted_and_replaced_by_the_next_install(
    tmp_path: Path, content: bytes
) -> None:
    home = Home(tmp_path / "home").ensure()
    file = installrecord.path(home, "acme")
    file.parent.mkdir(parents=True)
    file.write_bytes(content)
    with pytest.raises(ValueError, match="is not an install record"):
        installrecord.read(home, "acme")
    installrecord.remember(home, opts(tmp_path), fm_command_given=False)
    assert json.loads(file.read_text())["installs"][0]["project"] == str(tmp_path)
