"""``fm checkpoint``: exits 0 on a wake, 124 when quiet, 2 on bad arguments, never 0 for a live
watcher alone; an announced episode stays announced across checkpoints. Real arms and watchers."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.api import Home, watcher_health
from firstmate.testing import DEADLINE, arm_env, eventually, fm_command, fm_home, spawn_arm  # noqa: F401
from firstmate.testing.plant import announced_episode_with_late_row, queue_wake
from firstmate.testing.state import episode


@pytest.fixture
def env(fm_home: Home, tmp_path: Path) -> Iterator[dict[str, str]]:  # noqa: F811
    run_env = arm_env(fm_home, tmp_path)
    yield run_env
    subprocess.run(fm_command("arm", "--stop"), env=run_env, capture_output=True,
                   timeout=DEADLINE, check=False)


def checkpoint(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(fm_command("checkpoint", *args), env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=DEADLINE * 2)
    return proc.returncode, out, err


def wait_healthy(home: Home, env: dict[str, str]) -> int:
    def healthy() -> int | None:
        health = watcher_health(home, env)
        return int(health.pid) if health.healthy and health.pid else None
    return eventually("a healthy watcher", healthy, DEADLINE)


@pytest.mark.parametrize("args", [["--seconds", "0"], ["--seconds", "abc"], ["--seconds"],
                                  ["--seconds=-3"], ["--nope"], ["--seconds", "99999999"]])
def test_bad_arguments_exit_2(env: dict[str, str], args: list[str]) -> None:
    code, out, err = finish(checkpoint(env, *args))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err


def test_quiet_checkpoint_exits_124_and_stops_its_watcher(fm_home: Home,  # noqa: F811
                                                          env: dict[str, str]) -> None:
    code, out, _ = finish(checkpoint(env, "--seconds", "2"))
    assert code == 124
    assert out == "checkpoint: no actionable wake within 2s\n"
    assert not watcher_health(fm_home, env).healthy


def test_a_wake_prints_the_reason_and_exits_0(fm_home: Home, env: dict[str, str]) -> None:  # noqa: F811
    proc = checkpoint(env, "--seconds", "120")
    try:
        wait_healthy(fm_home, env)
        done = subprocess.run(fm_command("wake", "append", "signal", "ci", "build broke"),
                              env=env, capture_output=True, text=True, timeout=DEADLINE)
        assert done.returncode == 0, done.stderr
        code, out, _ = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0
    assert "signal:" in out and "fm wake drain" in out and out.startswith("FIRSTMATE_OP:")


def test_an_existing_live_watcher_is_never_success(fm_home: Home, tmp_path: Path,  # noqa: F811
                                                   env: dict[str, str]) -> None:
    arm = spawn_arm(fm_home, tmp_path, env=env)
    try:
        assert arm.status.startswith("watcher: started")
        code, out, err = finish(checkpoint(env, "--seconds", "2"))
        assert code == 124, (out, err)
        assert "attached" in err
        assert watcher_health(fm_home, env).healthy  # the foreign watcher is left alone
    finally:
        arm.stop()


def test_default_seconds_come_from_the_environment(env: dict[str, str]) -> None:
    # The older name is this plugin's (HarnessInfo.env_aliases): honoured while it is loaded.
    code, out, _ = finish(checkpoint({**env, "FIRSTMATE_PLUGINS": "codex",
                                      "FM_CODEX_WATCH_CHECKPOINT": "1"}))
    assert code == 124 and "within 1s" in out
    # The core name wins over the plugin's older one.
    code, out, _ = finish(checkpoint({**env, "FM_CHECKPOINT_SECONDS": "1",
                                      "FM_CODEX_WATCH_CHECKPOINT": "300"}))
    assert code == 124 and "within 1s" in out


def test_an_announced_episode_stays_announced(fm_home: Home, env: dict[str, str]) -> None:  # noqa: F811
    # A wake queued and announced, then a row behind the append path's back: only the
    # announced-episode reopen sees it.
    announced_episode_with_late_row(fm_home)
    announced = episode(fm_home)
    assert announced.get("status") == "announced"
    for _ in range(2):
        _code, out, _ = finish(checkpoint(env, "--seconds", "2"))
        assert "rearm-resurface" not in out
        after = episode(fm_home)
        assert after != {}
        assert (after["status"], after["generation"]) == ("announced", announced["generation"])


def test_a_never_announced_episode_is_still_announced(fm_home: Home,  # noqa: F811
                                                       env: dict[str, str]) -> None:
    queue_wake(fm_home, "signal", "a", "waiting work")
    pending = episode(fm_home)
    assert pending.get("status") == "pending"
    code, out, _ = finish(checkpoint(env, "--seconds", "60"))
    assert code == 0 and "check: rearm-resurface" in out
    assert episode(fm_home).get("status") == "announced"


def test_status_json_is_readable_after_a_checkpoint(fm_home: Home,  # noqa: F811
                                                    env: dict[str, str]) -> None:
    finish(checkpoint(env, "--seconds", "1"))
    done = subprocess.run(fm_command("status", "--json"), env=env, capture_output=True,
                          text=True, timeout=DEADLINE)
    assert json.loads(done.stdout)["watcher"]["healthy"] is False


def test_a_signalled_checkpoint_stops_its_arm_and_watcher(fm_home: Home,  # noqa: F811
                                                         env: dict[str, str]) -> None:
    import signal

    proc = checkpoint(env, "--seconds", "120")
    try:
        watcher = wait_healthy(fm_home, env)
        proc.send_signal(signal.SIGTERM)
        code, out, _ = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (code, out) == (143, "")
    assert not watcher_health(fm_home, env).healthy
    assert _zombie_or_gone(watcher)


def test_a_stop_pending_from_the_spawn_leaves_nothing_running(fm_home: Home,  # noqa: F811
                                                              env: dict[str, str]) -> None:
    import signal

    # TERM is inherited blocked and sent at once: it is handled when the checkpoint unblocks,
    # after its arm exists, and that arm is stopped before the checkpoint exits.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        proc = checkpoint(env, "--seconds", "120")
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc)
    assert (code, out) == (143, ""), err
    assert "Traceback" not in err
    assert watcher_health(fm_home, env).pid is None


def _zombie_or_gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
