"""Cursor's parked stop hook, run as Cursor runs it (``fm hook cursor stop``, payload on stdin):
follow-ups, chain budgets and resets, the park baton, the interrupted-park marker, and the
Pi-host stand-down. Real arms, watchers and the real store."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.api import Home, watcher_health
from firstmate.testing import DEADLINE, arm_env, eventually, fm_command, fm_home  # noqa: F401

STOP = {"conversation_id": "c-1", "generation_id": "g-1", "model": "m",
        "hook_event_name": "stop", "cursor_version": "2.0.0", "workspace_roots": ["/tmp"],
        "transcript_path": None, "status": "completed", "loop_count": 0}


@pytest.fixture
def env(fm_home: Home, tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    # Cursor runs its hooks in the workspace: a plain directory, wherever the tests run from
    # (a linked git worktree is a crew's, where the hook rightly stands down).
    monkeypatch.chdir(tmp_path)
    run_env = {k: v for k, v in arm_env(fm_home, tmp_path).items() if k != "FIRSTMATE_PLUGINS"}
    run_env.update(FM_SESSION_HOLDER_PID=str(os.getpid()), CURSOR_AGENT="1")
    done = subprocess.run(fm_command("crew", "add", "alpha", "--pane", "%0"), env=run_env,
                          capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0, done.stderr
    yield run_env
    subprocess.run(fm_command("arm", "--stop"), env=run_env, capture_output=True,
                   timeout=DEADLINE, check=False)


def start(env: dict[str, str], **payload: object) -> subprocess.Popen[str]:
    proc = subprocess.Popen(fm_command("hook", "cursor", "stop"), env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({**STOP, **payload}))
    proc.stdin.close()
    proc.stdin = None
    return proc


def answer(proc: subprocess.Popen[str]) -> tuple[dict[str, object], str]:
    try:
        out, err = proc.communicate(timeout=DEADLINE * 2)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err  # Cursor ignores every other exit code on stop
    assert out.count("\n") == 1, out  # exactly one JSON object
    return json.loads(out), err


def run(env: dict[str, str], **payload: object) -> tuple[dict[str, object], str]:
    return answer(start(env, **payload))


def append(env: dict[str, str], key: str, text: str) -> None:
    subprocess.run(fm_command("wake", "append", "signal", key, text), env=env, check=True,
                   capture_output=True, timeout=DEADLINE)


def wait_watcher(home: Home, env: dict[str, str], *, other_than: tuple[object, ...] = ()) -> int:
    def new_and_healthy() -> int | None:
        health = watcher_health(home, env)
        fresh = health.healthy and health.pid and health.pid not in other_than
        return int(health.pid) if fresh and health.pid else None
    return eventually("a (new) healthy watcher", new_and_healthy, DEADLINE)


def test_park_returns_the_wake_as_one_followup_and_rearms(fm_home: Home,  # noqa: F811
                                                          env: dict[str, str]) -> None:
    proc = start(env)
    first = wait_watcher(fm_home, env)
    append(env, "ci", "tests red")
    reply, _ = answer(proc)
    message = str(reply["followup_message"])
    assert message.startswith("FIRSTMATE_OP:") and "signal:" in message
    assert "fm wake drain" in message and "\n" not in message
    wait_watcher(fm_home, env, other_than=(first,))  # the successor holds the lock


def test_queued_wakes_refuse_the_allow_within_the_block_budget(env: dict[str, str]) -> None:
    append(env, "ci", "left over")
    for count in range(3):
        reply, _ = run(env, loop_count=count)
        assert "1 queued wake" in str(reply["followup_message"])
    reply, err = run(env, loop_count=3)
    # The notice names the real cause (wakes left unacknowledged), not a broken hook.
    assert reply == {} and "to drain 1 queued wake" in err and "fm wake drain" in err
    assert "repair the hook registration" not in err
    # loop_count 0 (a real user message) starts a fresh chain…
    assert "followup_message" in run(env, loop_count=0)[0]
    for count in (1, 2):
        run(env, loop_count=count)
    assert run(env, loop_count=3)[0] == {}
    # …and so does another conversation.
    assert "followup_message" in run(env, conversation_id="c-2", loop_count=4)[0]


def test_the_ceiling_sits_below_the_block_budget_when_asked(env: dict[str, str]) -> None:
    append(env, "ci", "left over")
    env = {**env, "FM_CURSOR_TURNEND_LOOP_CEILING": "2"}
    assert "followup_message" in run(env)[0]
    assert "followup_message" in run(env, loop_count=1)[0]
    reply, err = run(env, loop_count=2)
    assert reply == {} and "diagnostic ceiling" in err


def test_an_interrupted_park_is_reconciled_once(fm_home: Home, env: dict[str, str]) -> None:  # noqa: F811
    proc = start(env)
    wait_watcher(fm_home, env)
    proc.kill()  # Cursor killed the hook mid-park: its marker stays behind
    proc.wait(timeout=DEADLINE)
    assert (fm_home.state / "cursor-park-active").exists()
    subprocess.run(fm_command("arm", "--stop"), env=env, capture_output=True, timeout=DEADLINE)
    reply, _ = run(env, loop_count=1)
    assert "interrupted stop-hook park" in str(reply["followup_message"])
    assert not (fm_home.state / "cursor-park-active").exists()


def test_a_newer_park_supersedes_an_older_one(fm_home: Home, env: dict[str, str]) -> None:  # noqa: F811
    older = start(env)
    wait_watcher(fm_home, env)
    newer = start(env, generation_id="g-2")
    reply, _ = answer(older)
    assert reply == {}  # the older park stood down
    wait_watcher(fm_home, env)
    append(env, "ci", "for the newer park")
    reply, _ = answer(newer)
    assert "for the newer park" in str(reply["followup_message"])
    assert not (fm_home.state / "cursor-park-owner").exists()


def test_pi_hosting_cursor_hooks_stands_down(env: dict[str, str]) -> None:
    append(env, "ci", "would need a drain")
    pi = {k: v for k, v in env.items() if k not in ("CURSOR_AGENT", "CURSOR_INVOKED_AS")}
    pi["PI_CODING_AGENT"] = "true"
    proc = start(pi)
    out, _ = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0 and out.strip() in ("", "{}")
    # The same host with Cursor's own agent marker is Cursor.
    assert "followup_message" in run({**pi, "CURSOR_INVOKED_AS": "cursor-agent"})[0]


def test_aborted_stops_never_park(env: dict[str, str]) -> None:
    assert run(env, status="aborted")[0] == {}
