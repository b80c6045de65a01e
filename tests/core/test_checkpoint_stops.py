"""``fm checkpoint``'s stops: the quiet window's own stop of its watcher is quiet on stderr (the
triage log still records it), a stop nobody planned is reported. Real checkpoints, arms and
watchers."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.store.health import watcher_health
from firstmate.store.home import Home
from firstmate.testing import DEADLINE, arm_env, fm_command

STOP_LINE = "watcher: stopped by SIGTERM; publishing downtime and releasing the lock"


@pytest.fixture
def env(fm_home: Home, tmp_path: Path) -> Iterator[dict[str, str]]:
    run_env = arm_env(fm_home, tmp_path, FM_ARM_SUCCESSOR_CONFIRM_TIMEOUT="1")
    yield run_env
    subprocess.run(fm_command("arm", "--stop"), env=run_env, capture_output=True,
                   timeout=DEADLINE, check=False)


def checkpoint(env: dict[str, str], seconds: int) -> subprocess.Popen[str]:
    return subprocess.Popen(fm_command("checkpoint", "--seconds", str(seconds)), env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=DEADLINE * 2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


def started_watcher(proc: subprocess.Popen[str]) -> str:
    """The checkpoint's first stderr line: its arm started a watcher."""
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert line.startswith("watcher: started pid="), line
    return line


def triage(home: Home) -> str:
    path = home.logs / "triage.log"
    return path.read_text() if path.exists() else ""


def test_the_quiet_windows_own_stop_prints_nothing_about_it(fm_home: Home,
                                                            env: dict[str, str]) -> None:
    code, out, err = finish(checkpoint(env, 1))
    assert (code, out) == (124, "checkpoint: no actionable wake within 1s\n")
    assert err.startswith("watcher: started pid=") and err.count("\n") == 1, err
    assert "SIGTERM" not in err and "downtime" not in err
    assert not watcher_health(fm_home, env).healthy
    assert STOP_LINE in triage(fm_home)  # the record keeps it


def test_a_stop_nobody_planned_is_still_reported(fm_home: Home, env: dict[str, str]) -> None:
    proc = checkpoint(env, 120)
    try:
        started_watcher(proc)
        stopped = subprocess.run(fm_command("arm", "--stop"), env=env, capture_output=True,
                                 text=True, timeout=DEADLINE, check=False)
        assert stopped.returncode == 0 and stopped.stdout.startswith("watcher: stopped pid=")
        code, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (code, out) == (1, "watcher: FAILED - cycle ended without an actionable reason\n")
    assert err.splitlines() == [STOP_LINE]


def test_a_signalled_checkpoint_reports_its_watchers_stop(fm_home: Home,
                                                          env: dict[str, str]) -> None:
    proc = checkpoint(env, 120)
    try:
        started_watcher(proc)
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (code, out) == (130, "")
    assert err.splitlines() == [STOP_LINE]
    assert time.monotonic() - start < DEADLINE
    assert not watcher_health(fm_home, env).healthy
