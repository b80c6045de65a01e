"""The crew fleet rig: ``fm`` against a home and a real tmux server on a private socket, with a
stand-in harness plugin (tests/core/fakecrew) whose agent records how it was started and what
it was typed, and runs its crew-mode turn-end command as a harness's hook would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import attrs
from firstmate.store.home import Home
from firstmate.testing.procs import eventually
from firstmate.testing.sites import declare
from firstmate.watch.backends.tmux import TmuxBackend

CORE = Path(__file__).resolve().parents[2] / "core"
FAKE = Path(__file__).resolve().parent / "fakecrew"
DEADLINE = 30.0
T = TypeVar("T")

@attrs.define
class Fleet:
    tmp: Path
    socket: str
    home: Home
    env: dict[str, str]

    @property
    def records(self) -> Path:
        return self.tmp / "records"

    def fm(self, *args: str, cwd: Path | None = None,
           **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "firstmate", *args], cwd=cwd or self.tmp,
                              env={**self.env, **extra}, capture_output=True, text=True,
                              timeout=90, check=False)

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True,
                              timeout=30, check=False)

    def started(self, name: str) -> dict[str, Any]:
        path = self.records / f"{name}.json"

        def whole() -> dict[str, Any] | None:
            try:  # (read while the agent writes it: not whole yet)
                value = json.loads(path.read_text())
            except (OSError, ValueError):
                return None
            return value if isinstance(value, dict) else None

        return eventually(f"the agent of {name} to record its start", whole)

    def turns(self, name: str) -> list[str]:
        path = self.records / f"{name}.turns"
        return path.read_text().splitlines() if path.exists() else []

    def backend(self) -> TmuxBackend:
        return TmuxBackend.from_env(self.env)


def make_fleet(tmp_path: Path) -> Iterator[Fleet]:
    socket = f"fm-crew-{os.getpid()}-{tmp_path.name}"[:60]
    home = Home(tmp_path / "home").ensure()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FM_", "FAKECREW_")) and k not in ("TMUX", "TMUX_PANE")}
    declared = tmp_path / "fakecrew-site"  # (its entry point: fm finds plugins by nothing else)
    declared.mkdir()
    declare(declared, "fakecrew", "firstmate_plugin_fakecrew")
    paths = [str(CORE), str(FAKE), str(declared),
             *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    (tmp_path / "records").mkdir()
    env.update(PYTHONPATH=os.pathsep.join(paths), FM_HOME=str(home.root), FM_TMUX_SOCKET=socket,
               FAKECREW_DIR=str(tmp_path / "records"), FAKECREW_SECRET="s3cret",
               TMUX="/tmp/spawner-tmux,1,0", TMUX_PANE="%424242")
    made = Fleet(tmp_path, socket, home, env)
    try:
        yield made
    finally:
        made.tmux("kill-server")


def spawned(fleet: Fleet, name: str = "w1", *args: str,
            **extra: str) -> subprocess.CompletedProcess[str]:
    done = fleet.fm("crew", "spawn", name, "--harness", "fakecrew", *args, **extra)
    assert done.returncode == 0, done.stderr
    return done
