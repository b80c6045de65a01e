"""A scratch git project to run ``fm install`` in, and what ``fm doctor`` then says of it: the
rig every plugin's install tests share (real ``fm`` processes, real files, real git)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from firstmate.testing.procs import DEADLINE, fm_command


def run_fm(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """This fm with *args* in *cwd*, as a user's shell runs it."""
    return subprocess.run(fm_command(*args), capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=DEADLINE * 4, check=False)


def scratch_project(tmp_path: Path, *, drop: tuple[str, ...] = (),
                    **extra: str) -> tuple[dict[str, str], Path, Path]:
    """``(env, project, home)``: a fresh git project, a home for it, a private HOME and key
    folder; the caller's FM_* and *drop*-prefixed variables left out, *extra* set."""
    project, home, user = tmp_path / "project", tmp_path / "home", tmp_path / "user"
    project.mkdir()
    user.mkdir(exist_ok=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True, timeout=DEADLINE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FM_", *drop))}
    env.update(FM_HOME=str(home), HOME=str(user), FIRSTMATE_KEYS_DIR=str(tmp_path / "keys"),
               **extra)
    return env, project, home


def config_findings(env: dict[str, str], project: Path, harness: str) -> list[dict[str, Any]]:
    """``fm doctor --json``'s findings on *harness*'s config files in *project*."""
    done = run_fm(env, project, "doctor", "--json")
    return [f for f in json.loads(done.stdout)["findings"]
            if f["check"] == "harness-config" and harness in f["detail"]]


def config_finding(env: dict[str, str], project: Path, harness: str) -> dict[str, Any]:
    """The one finding :func:`config_findings` gives."""
    found = config_findings(env, project, harness)
    assert len(found) == 1, found
    return found[0]


__all__ = ["config_finding", "config_findings", "run_fm", "scratch_project"]
