"""fm starts itself as ``python -P -m firstmate``: ``-m`` alone puts the working directory first on
sys.path, and fm runs in project directories (hooks, arms, bridges), so a cloned repository's
``firstmate/`` package would run in fm's place. Real interpreters in a hostile directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from firstmate.testing import DEADLINE


def test_own_module_commands_never_import_from_the_working_directory(tmp_path: Path) -> None:
    """``python -m firstmate`` puts the working directory first on sys.path: a project holding a
    ``firstmate/`` package would run in its place (hooks run in the project directory, and so
    do the watchers an arm starts there)."""
    from firstmate.continuity.engine import default_arm_command
    from firstmate.plugin.fmcommand import own_argv

    hostile = tmp_path / "clone"
    (hostile / "firstmate").mkdir(parents=True)
    sentinel = tmp_path / "PWNED"
    (hostile / "firstmate" / "__init__.py").write_text("")
    (hostile / "firstmate" / "__main__.py").write_text(
        f"open({str(sentinel)!r}, 'w').write('x')\n")
    no_script = str(tmp_path / "no-venv" / "bin" / "python")
    argvs = [[*default_arm_command()[:-1], "--version"],
             [sys.executable, *own_argv(no_script)[1:], "--version"]]
    from firstmate.base.names import fm_module_argv

    for argv in [*argvs, fm_module_argv("--version")]:
        done = subprocess.run(argv, cwd=hostile, capture_output=True, text=True,
                              timeout=DEADLINE, check=False)
        assert not sentinel.exists(), argv
        assert done.stdout.startswith("fm "), (argv, done.stderr)


def test_an_arm_started_in_a_cloned_repository_runs_the_real_watcher(tmp_path: Path) -> None:
    import os

    hostile = tmp_path / "clone"
    (hostile / "firstmate").mkdir(parents=True)
    sentinel = tmp_path / "PWNED"
    (hostile / "firstmate" / "__init__.py").write_text("")
    (hostile / "firstmate" / "__main__.py").write_text(
        f"open({str(sentinel)!r}, 'w').write('x')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(FM_HOME=str(tmp_path / "home"), FIRSTMATE_PLUGINS="none",
               FM_TMUX=str(tmp_path / "no-tmux"), FM_HEARTBEAT="1000000",
               FM_HEARTBEAT_MAX="1000000")
    fm = [sys.executable, "-P", "-m", "firstmate"]  # (this test's own fm, safe in that directory)
    subprocess.run([*fm, "wake", "append", "signal", "k", "hello"], cwd=hostile, env=env,
                   check=True, capture_output=True, timeout=DEADLINE)
    done = subprocess.run([*fm, "arm"], cwd=hostile, env=env, capture_output=True, text=True,
                          timeout=DEADLINE * 2, check=False)
    assert not sentinel.exists(), "the arm's watcher ran the repository's firstmate/"
    # The real watcher: started, and it woke the arm for the queued row.
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0].startswith("watcher: started"), done
    assert lines[1:] == ["check: rearm-resurface"], done
