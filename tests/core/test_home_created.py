"""A command that makes a new home says so in one stderr line (a mistyped ``FM_HOME`` must not
silently start an empty home); an existing home, a hook and ``fm arm --stop`` say nothing.
Real ``fm`` processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from firstmate.base.homeroot import created_line
from firstmate.store.home import Home

CORE = str(Path(__file__).resolve().parents[2] / "core")


def run(*args: str, cwd: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(PYTHONPATH=CORE, FM_TMUX="/nonexistent/tmux", **extra)
    return subprocess.run([sys.executable, "-m", "firstmate", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=60, check=False)


def spawn(*args: str, **extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(PYTHONPATH=CORE, **extra)
    return subprocess.Popen([sys.executable, "-m", "firstmate", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_a_mistyped_fm_home_is_announced_once(tmp_path: Path) -> None:
    typo = tmp_path / "fleet-hmoe"
    first = run("wake", "append", "signal", "a", "x", FM_HOME=str(typo))
    assert (first.returncode, first.stdout) == (0, "1\n")
    assert first.stderr == (f"fm: created a new home at {typo} (FM_HOME={typo}); if you meant an "
                            "existing home, correct FM_HOME\n")
    second = run("wake", "append", "signal", "b", "y", FM_HOME=str(typo))
    assert (second.returncode, second.stdout, second.stderr) == (0, "2\n", "")


def test_every_creating_command_announces_and_an_existing_home_is_quiet(tmp_path: Path) -> None:
    for i, argv in enumerate((["crew", "add", "w1", "--pane", "%1"], ["wake", "drain"],
                              ["check", "add", "c1", "--", "true"], ["lock", "status"])):
        home = tmp_path / f"home{i}"
        done = run(*argv, FM_HOME=str(home))
        announced = done.stderr.splitlines()[:1] == [created_line(str(home), {"FM_HOME": str(home)})]
        # `fm lock status` only reads: it creates nothing, so it announces nothing.
        assert announced == (argv[0] != "lock"), (argv, done.stderr)
        assert home.exists() == announced
    existing = Home(tmp_path / "ready").ensure()
    done = run("crew", "add", "w1", "--pane", "%1", FM_HOME=str(existing.root))
    assert done.returncode == 0 and "created a new home" not in done.stderr


def test_an_existing_directory_that_was_no_home_is_announced(tmp_path: Path) -> None:
    project = tmp_path / "project"  # FM_HOME pointed at a project by mistake
    project.mkdir()
    (project / "README").write_text("mine\n")
    done = run("wake", "append", "signal", "a", "x", FM_HOME=str(project))
    assert done.returncode == 0
    assert done.stderr.startswith(f"fm: created a new home at {project} (FM_HOME=")


def test_without_fm_home_the_line_says_where_the_home_came_from(tmp_path: Path) -> None:
    user_home = tmp_path / "user"
    user_home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    done = run("wake", "append", "signal", "a", "x", cwd=work, HOME=str(user_home))
    assert done.returncode == 0
    assert done.stderr == (
        f"fm: created a new home at {user_home / '.firstmate'} (FM_HOME is not set and no "
        f".firstmate/ of yours is at or above {work}); set FM_HOME to use another home\n")
    pinned = tmp_path / "repo" / ".firstmate"
    pinned.mkdir(parents=True, mode=0o700)  # the user made the marker; fm fills it
    done = run("wake", "append", "signal", "a", "x", cwd=pinned.parent, HOME=str(user_home))
    assert done.returncode == 0
    assert done.stderr == (
        f"fm: created a new home at {pinned} (the nearest .firstmate/ at or above "
        f"{pinned.parent}); set FM_HOME to use another home\n")


def test_commands_that_only_look_create_and_announce_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "never-made"
    for argv in (["arm", "--stop"], ["crew", "list"], ["lock", "status"]):
        done = run(*argv, FM_HOME=str(missing))
        assert "created a new home" not in done.stderr, argv
    assert not missing.exists()


def test_first_commands_racing_on_a_fresh_home_all_succeed_and_one_announces(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    procs = [spawn("wake", "append", "signal", f"k{i}", "x", FM_HOME=str(fresh)) for i in range(6)]
    results = [(proc.wait(timeout=60), *proc.communicate(timeout=60)) for proc in procs]
    assert [code for code, _, _ in results] == [0] * 6, results
    assert sorted(int(out) for _, out, _ in results) == [1, 2, 3, 4, 5, 6]
    announced = [err for _, _, err in results if "created a new home" in err]
    assert len(announced) == 1, results
