"""What ``fm install`` writes into hooks (firstmate.plugin.fmcommand) and what it records for
``fm doctor`` (firstmate.plugin.installrecord)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from firstmate.plugin import filestage, fmcommand, installrecord
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
    with filestage.transaction():
        installrecord.remember(home, opts(a), fm_command_given=False)
        installrecord.remember(home, opts(a, local="true"), fm_command_given=True)
        # (a read inside the transaction sees what it staged)
        assert len(installrecord.load(home, "acme").records) == 2
    installrecord.remember(home, opts(b), fm_command_given=False)
    installrecord.remember(home, opts(b), fm_command_given=False)  # the same install again
    loaded = installrecord.load(home, "acme")
    assert len(loaded.records) == 3 and loaded.rejected == 0 and not loaded.complaint()
    newest, older = loaded.for_project(a)
    assert newest.flags == (("local", "true"),) and older.flags == ()
    assert newest.command() == f"fm install acme --project {a} --fm-command /venv/bin/fm --local"
    assert older.command("uninstall") == f"fm uninstall acme --project {a}"
    assert newest.options(dry_run=True) == InstallOptions(
        "acme", a, None, True, "/venv/bin/fm", {"local": "true"})
    # After an uninstall only the installs that are gone are dropped.
    installrecord.prune(home, "acme", a, lambda record: record.flags == ())
    assert [r.flags for r in installrecord.load(home, "acme").for_project(a)] == [()]
    installrecord.prune(home, "acme", b, lambda record: False)
    installrecord.prune(home, "acme", a, lambda record: False)
    assert not installrecord.path(home, "acme").exists()


def test_every_entry_is_bound_to_its_home_and_harness(tmp_path: Path) -> None:
    home, other = Home(tmp_path / "home").ensure(), Home(tmp_path / "other").ensure()
    installrecord.remember(home, opts(tmp_path), fm_command_given=True)
    file = installrecord.path(home, "acme")
    doc = json.loads(file.read_text())
    assert len(doc["installs"][0]["mac"]) == 64
    # Another home of the same user, another harness's file, one changed word: none verify.
    for target in (installrecord.path(other, "acme"), installrecord.path(home, "other")):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(file.read_text())
    assert installrecord.load(other, "acme").rejected == 1
    assert installrecord.load(home, "other").rejected == 1
    doc["installs"][0]["fm_command"] = "/tmp/evil"
    file.write_text(json.dumps(doc))
    loaded = installrecord.load(home, "acme")
    assert loaded.records == {} and loaded.rejected == 1
    assert "not written by fm install for this home" in loaded.complaint()
    assert loaded.fix("acme") == f"rm -- {file}"


@pytest.mark.parametrize("content", [b"{", b"[]", b'{"installs": [{"project": 3}]}',
                                     b'{"installs": [{"project": "/p", "fm_command": " "}]}',
                                     b'{"installs": [{"project": "/p", "fm_command": "fm", "flags": [1]}]}',
                                     b'{"installs": [{"project": "/p", "fm_command": "fm", "at": 1e999}]}',
                                     b'{"installs": ' + b"[" * 50000 + b"]" * 50000 + b"}",
                                     b"\xff"])
def test_a_damaged_record_is_named_never_trusted_and_replaced_by_the_next_install(
    tmp_path: Path, content: bytes
) -> None:
    home = Home(tmp_path / "home").ensure()
    file = installrecord.path(home, "acme")
    file.parent.mkdir(parents=True)
    file.write_bytes(content)
    loaded = installrecord.load(home, "acme")
    assert loaded.records == {} and loaded.complaint(), loaded
    installrecord.remember(home, opts(tmp_path), fm_command_given=False)
    assert json.loads(file.read_text())["installs"][0]["project"] == str(tmp_path)
    assert not installrecord.load(home, "acme").complaint()


@pytest.mark.parametrize("kind", ["fifo", "dir", "symlink", "shared", "foreign"])
def test_a_record_that_is_not_a_private_regular_file_is_never_read(
        tmp_path: Path, kind: str) -> None:
    home = Home(tmp_path / "home").ensure()
    file = installrecord.path(home, "acme")
    file.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(file)  # (a read would wait for a writer forever)
    elif kind == "dir":
        file.mkdir()
    elif kind == "symlink":
        installrecord.remember(Home(tmp_path / "other").ensure(), opts(tmp_path),
                               fm_command_given=False)
        file.symlink_to(installrecord.path(Home(tmp_path / "other"), "acme"))
    else:
        installrecord.remember(home, opts(tmp_path), fm_command_given=False)
        if kind == "shared":
            file.chmod(0o666)
        elif os.geteuid() == 0:
            os.chown(file, 4242, 4242)  # another user's file (as root: a real other uid)
        else:
            pytest.skip("only root can give a file to another user")
    loaded = installrecord.load(home, "acme")
    assert loaded.records == {} and loaded.problem, loaded


def test_installs_made_within_one_millisecond_or_after_the_clock_went_back_keep_their_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = Home(tmp_path / "home").ensure()
    a = tmp_path / "a"
    clock = iter([1000.0, 1000.0, 999.0])
    monkeypatch.setattr(installrecord.time, "time", lambda: next(clock))
    installrecord.remember(home, opts(a), fm_command_given=False)
    installrecord.remember(home, opts(a, local="true"), fm_command_given=False)
    assert [r.flags for r in installrecord.load(home, "acme").for_project(a)] == [
        (("local", "true"),), ()]
    installrecord.remember(home, opts(a), fm_command_given=False)  # again, the clock behind
    assert [r.flags for r in installrecord.load(home, "acme").for_project(a)] == [
        (), (("local", "true"),)]
