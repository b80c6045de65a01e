"""A rig for running the real ``fm hook claude …`` processes against a real home.

The test process plays Claude: hook processes are its children, and ``FM_SESSION_HOLDER_PID``
names it as the session-lock holder, exactly as a Claude process above the hook would be.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import firstmate.api
import firstmate_plugin_claude
import pytest
from firstmate.api import Home
from firstmate.testing.state import arm_links, claim

DEADLINE = 30.0
# (firstmate/api/__init__.py: the directory holding the firstmate package)
PATHS = [str(Path(firstmate.api.__file__).resolve().parents[2]),
         str(Path(firstmate_plugin_claude.__file__).resolve().parents[1])]


@attrs.define
class Rig:
    home: Home
    project: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[str]] = attrs.Factory(list)

    def payload(self, event: str = "Stop", **extra: Any) -> str:
        body = {"session_id": "sess-1", "transcript_path": "/dev/null", "cwd": str(self.project),
                "hook_event_name": event, "stop_hook_active": True,
                "last_assistant_message": "ok", **extra}
        return json.dumps(body)

    def fm(self, *args: str, env: dict[str, str] | None = None,
           stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "firstmate", *args], input=stdin,
                              env=env or self.env, capture_output=True, text=True, timeout=120,
                              check=False)

    def start_hook(self, event: str = "stop", payload: str | None = None,
                   **extra_env: str) -> subprocess.Popen[str]:
        claude_event = {"stop": "Stop", "stop-failure": "StopFailure",
                        "session-start": "SessionStart"}[event]
        proc = subprocess.Popen(
            [sys.executable, "-m", "firstmate", "hook", "claude", event, "--home",
             str(self.home.root)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**self.env, **extra_env})
        assert proc.stdin is not None
        proc.stdin.write(payload if payload is not None else self.payload(claude_event))
        proc.stdin.close()
        proc.stdin = None  # communicate() must not flush the closed pipe
        self.procs.append(proc)
        return proc

    def run_hook(self, event: str = "stop", payload: str | None = None,
                 **extra_env: str) -> tuple[int, str, str]:
        proc = self.start_hook(event, payload, **extra_env)
        out, err = proc.communicate(timeout=120)
        return proc.returncode, out, err

    def session_start(self) -> str:
        code, out, err = self.run_hook("session-start")
        assert code == 0, err
        return out

    def add_crew(self, name: str = "builder") -> None:
        done = self.fm("crew", "add", name, "--pane", "%99999")
        assert done.returncode == 0, done.stderr

    def append(self, text: str, key: str = "builder") -> None:
        done = self.fm("wake", "append", "signal", key, text)
        assert done.returncode == 0, done.stderr

    def status(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.fm("status", "--json").stdout)
        return value

    def healthy_watcher(self) -> int | None:
        watcher = self.status().get("watcher") or {}
        pid = watcher.get("pid")
        return pid if watcher.get("healthy") and isinstance(pid, int) else None

    def ledger(self) -> dict[str, Any]:
        return claim(self.home, "claude")

    def parked(self, after: int = 0) -> int | None:
        """The epoch of an ``arming`` claim newer than *after* once the newest hook's arm is
        linked to the healthy watcher (started it, or attached to it). Before that link a wake
        could close the watcher with nobody following it, and come back as a resurface."""
        entry = self.ledger()
        watcher = self.healthy_watcher()
        if entry.get("outcome") != "arming" or entry.get("epoch", 0) <= after or watcher is None:
            return None
        return int(entry["epoch"]) if self.hook_linked(watcher) else None

    def hook_linked(self, watcher: int) -> bool:
        """Whether an arm under a live hook process started or attached to *watcher*."""
        import psutil

        arms: set[int] = set()
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(psutil.Error):
                    arms |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        return any(pair[1] == watcher and pair[0] in arms for pair in arm_links(self.home))

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        self.fm("arm", "--stop")


@pytest.fixture(name="rig")
def rig_fixture(tmp_path: Path) -> Iterator[Rig]:
    home = Home(tmp_path / "home").ensure()
    project = tmp_path / "project"
    project.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FM_", "CLAUDE_", "GROK_"))}
    env.update({
        "FM_HOME": str(home.root),
        "PYTHONPATH": os.pathsep.join([*PATHS, env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "FM_SESSION_HOLDER_PID": str(os.getpid()),
        "FM_PROJECT_DIR": str(project),
        "FM_CLAUDE_STOPFAILURE_COOLDOWN_MS": "0",
    })
    made = Rig(home, project, env)
    try:
        yield made
    finally:
        made.close()
