"""The Codex Stop hook: guard blocks bounded by our own cap; the opt-in parked Stop."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from firstmate.api import Home, watcher_health
from firstmate.testing import DEADLINE, arm_env, eventually, fm_command, fm_home  # noqa: F401
from firstmate_plugin_codex.hooks import plugin

STOP = {"session_id": "s-1", "turn_id": "t-1", "cwd": "/tmp", "hook_event_name": "Stop",
        "model": "m", "permission_mode": "default", "stop_hook_active": False,
        "last_assistant_message": "done"}


@pytest.fixture
def env(fm_home: Home, tmp_path: Path) -> dict[str, str]:  # noqa: F811
    run_env = arm_env(fm_home, tmp_path)
    done = subprocess.run(fm_command("crew", "add", "alpha", "--pane", "%0"), env=run_env,
                          capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0, done.stderr
    yield run_env
    subprocess.run(fm_command("arm", "--stop"), env=run_env, capture_output=True,
                   timeout=DEADLINE, check=False)


def hook(home: Home, env: dict[str, str], **payload: object) -> dict[str, object]:
    outcome = plugin.firstmate_hook(harness="codex", event="stop", payload={**STOP, **payload},
                                    home=home, env=env)
    assert outcome is not None and outcome.exit_code == 0
    return json.loads(outcome.stdout) if outcome.stdout.strip() else {}


def test_guard_blocks_up_to_our_cap_then_lets_the_stop_through(fm_home: Home,  # noqa: F811
                                                                env: dict[str, str]) -> None:
    for _ in range(3):
        answer = hook(fm_home, env)
        assert answer["decision"] == "block" and "FIRSTMATE_OP" in str(answer["reason"])
    spent = hook(fm_home, env)
    assert "decision" not in spent and "without a wake" in str(spent["systemMessage"])
    # A stop that follows a block is always let through (Codex's own stop_hook_active).
    assert hook(fm_home, {**env, "FM_CODEX_STOP_BLOCK_BUDGET": "9"}, stop_hook_active=True) == {}


def test_the_block_tells_the_model_what_its_protocol_allows(fm_home: Home,  # noqa: F811
                                                             env: dict[str, str]) -> None:
    from firstmate_plugin_codex.hooks import PROTOCOL

    reason = str(hook(fm_home, env)["reason"])
    # The protocol forbids starting fm arm; its bounded checkpoint is what the model runs.
    assert "Never start `fm arm`" in PROTOCOL
    assert "fm arm" not in reason
    assert "`fm checkpoint --seconds 180` in the foreground" in reason


def test_cap_is_configurable_and_per_session(fm_home: Home, env: dict[str, str]) -> None:  # noqa: F811
    env = {**env, "FM_CODEX_STOP_BLOCK_BUDGET": "1"}
    assert hook(fm_home, env)["decision"] == "block"
    assert "systemMessage" in hook(fm_home, env)
    assert hook(fm_home, env, session_id="s-2")["decision"] == "block"


def test_no_supervision_need_never_blocks(tmp_path: Path) -> None:
    home = Home(tmp_path / "h").ensure()
    assert hook(home, arm_env(home, tmp_path)) == {}


def park_hook(env: dict[str, str], **payload: object) -> subprocess.Popen[str]:
    """``fm hook codex stop`` in parked mode, as Codex runs it: a child of the "harness" (this
    test process, named the session holder)."""
    run_env = {k: v for k, v in env.items() if k != "FIRSTMATE_PLUGINS"}
    run_env.update(FM_CODEX_STOP_MODE="park", FM_SESSION_HOLDER_PID=str(os.getpid()))
    proc = subprocess.Popen(fm_command("hook", "codex", "stop"), env=run_env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({**STOP, **payload}))
    proc.stdin.close()
    proc.stdin = None  # communicate() must not flush it again
    return proc


def wait_watcher(home: Home, env: dict[str, str], *, other_than: tuple[object, ...] = ()) -> int:
    def new_and_healthy() -> int | None:
        health = watcher_health(home, env)
        fresh = health.healthy and health.pid and health.pid not in other_than
        return int(health.pid) if fresh and health.pid else None
    return eventually("a (new) healthy watcher", new_and_healthy, DEADLINE)


def test_parked_stop_blocks_with_the_wake_and_leaves_a_successor(fm_home: Home,  # noqa: F811
                                                                 env: dict[str, str]) -> None:
    proc = park_hook(env)
    try:
        first = wait_watcher(fm_home, env)
        done = subprocess.run(fm_command("wake", "append", "signal", "ci", "deploy failed"),
                              env=env, capture_output=True, text=True, timeout=DEADLINE)
        assert done.returncode == 0, done.stderr
        out, err = proc.communicate(timeout=DEADLINE * 2)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    answer = json.loads(out)
    assert answer["decision"] == "block"
    assert "signal:" in answer["reason"] and "fm wake drain" in answer["reason"]
    wait_watcher(fm_home, env, other_than=(first,))
    assert not os.path.exists(fm_home.state / "codex-park-active")


def test_a_newer_park_supersedes_an_older_one(fm_home: Home,  # noqa: F811
                                              env: dict[str, str]) -> None:
    older = park_hook(env)
    newer = None
    try:
        wait_watcher(fm_home, env)
        newer = park_hook(env, turn_id="t-2")
        out, _ = older.communicate(timeout=DEADLINE * 2)
        assert older.returncode == 0 and out == ""  # stood down silently
        wait_watcher(fm_home, env)
        subprocess.run(fm_command("wake", "append", "signal", "ci", "second"), env=env,
                       capture_output=True, timeout=DEADLINE, check=True)
        out, _ = newer.communicate(timeout=DEADLINE * 2)
        assert json.loads(out)["decision"] == "block"
    finally:
        for proc in (older, newer):
            if proc is not None and proc.poll() is None:
                proc.kill()


def test_install_parked_mode(tmp_path: Path) -> None:
    from firstmate.api import InstallOptions

    plugin.firstmate_install(options=InstallOptions("codex", tmp_path, flags={"parked": "true"}))
    handler = json.loads((tmp_path / ".codex" / "hooks.json").read_text())["hooks"]["Stop"][0][
        "hooks"][0]
    assert handler["command"] == "env FM_CODEX_STOP_MODE=park fm hook codex stop"
    assert handler["timeout"] > 3600
    plugin.firstmate_uninstall(options=InstallOptions("codex", tmp_path))
    assert not (tmp_path / ".codex").exists()
