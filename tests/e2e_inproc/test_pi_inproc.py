"""End to end: the real Pi (npm ``@mariozechner/pi-coding-agent``) in RPC mode against a loopback
mock of the Anthropic Messages API, supervised through the shim ``fm install pi`` writes and the
``fm bridge pi`` process it starts.

1. After the first turn a watcher is healthy; a wake appended from outside reaches the model, and
   at the moment the harness sends it, a successor watcher already holds the watcher lock.
2. A session replacement (RPC ``new_session``, Pi's ``/new``) issued while a close is pending
   delivers that wake to the model exactly once; a later wake proves supervision went on.
3. A bridge killed while Pi runs is restarted by the shim (one notice), and the next wake still
   reaches the model (as itself, or resurfaced from the queue) with a successor holding the lock.

Skipped only when node/npm are absent. The npm install is cached under ``.e2e-cache/``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from firstmate.testing.procs import eventually

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mock_api import MockApi, newest_user_text
from rig import (
    DEADLINE,
    Rig,
    Rpc,
    assert_successor_held,
    needs_node,
    npm_install,
    replace_while_close_pending,
    rig,
    rpc_first_turn,
    wake_reaches_model,
)

PI_VERSION = "0.73.1"
RESURFACE = "check: rearm-resurface"
pytestmark = [needs_node, pytest.mark.timeout(900)]


def pi_bin() -> Path:
    return npm_install("pi", PI_VERSION, [f"@mariozechner/pi-coding-agent@{PI_VERSION}"], "pi")


def start_pi(r: Rig, mock: MockApi, package: Path | None = None,
             before_start: Callable[[], object] | None = None) -> Rpc:
    """Pi in RPC mode, its shim from ``fm install pi`` or, given *package*, from that directory
    as a Pi package (``pi install DIR -l``) with nothing installed by fm; *before_start* runs
    just before Pi starts."""
    binary = pi_bin()
    r.setup(extra_env={"PI_OFFLINE": "1"}, install=package is None)
    if package is not None:
        for args in (["install", str(package), "-l"], ["list"]):
            done = subprocess.run([str(binary), *args], cwd=r.project, env=r.env,
                                  capture_output=True, text=True, timeout=300,
                                  stdin=subprocess.DEVNULL, check=False)
            assert done.returncode == 0 and str(package) in done.stdout, (
                f"pi {' '.join(args)}: {done.stdout}{done.stderr}")
    agent = r.user / ".pi" / "agent"
    agent.mkdir(parents=True)
    (agent / "models.json").write_text(json.dumps({"providers": {"mock": {
        "baseUrl": mock.root, "api": "anthropic-messages", "apiKey": "sk-dummy",
        "models": [{"id": "mock-model", "reasoning": False, "input": ["text"],
                    "contextWindow": 200000, "maxTokens": 4096}]}}}))
    mock.probe = r.health_now
    if before_start is not None:
        before_start()
    return r.rpc([str(binary), "--mode", "rpc", "--provider", "mock", "--model", "mock-model",
                  "--no-session"], "pi")


def test_wake_reaches_pi_with_a_successor_holding_the_lock(tmp_path: Path, mock: MockApi) -> None:
    with rig(tmp_path, "pi") as r:
        pi = start_pi(r, mock)
        first = rpc_first_turn(r, pi, mock)
        wake_reaches_model(r, pi, mock, first, "PI")


def test_new_session_while_a_close_is_pending_delivers_once(tmp_path: Path,
                                                             mock: MockApi) -> None:
    with rig(tmp_path, "pi") as r:
        pi = start_pi(r, mock)
        first = rpc_first_turn(r, pi, mock)
        replace_while_close_pending(r, pi, mock, first, "PI")
        state = r.bridge_state()
        assert state.get("generation", 0) > 1 and state.get("phase") == "active", (
            f"the bridge did not see Pi's session replacement: {state}")


def test_a_killed_bridge_is_restarted_and_the_next_wake_arrives(tmp_path: Path,
                                                                 mock: MockApi) -> None:
    with rig(tmp_path, "pi") as r:
        pi = start_pi(r, mock)
        rpc_first_turn(r, pi, mock)
        [bridge] = r.bridges()
        os.kill(bridge, signal.SIGKILL)
        eventually("the shim to restart fm bridge pi",
                   lambda: [pid for pid in r.bridges() if pid != bridge],
                   deadline=DEADLINE, diag=r.diag)
        # The restarted bridge adopts (or replaces) the watcher the dead one left behind.
        before = eventually("a healthy watcher after the restart", r.watcher, diag=r.diag, deadline=DEADLINE)
        text = f"WAKE-PI-RESTART-{uuid.uuid4().hex[:8]}"
        r.wake(f"signal: builder done: {text}")
        # The dead bridge's watcher may take the wake and close to an arm nobody reads; then the
        # row stays queued and the restarted bridge's watcher resurfaces it (docs/bridge.md,
        # Restarts): the model gets `check: rearm-resurface`, and drain presents the row.
        request = eventually(f"the mock to receive {text} or {RESURFACE}",
                             lambda: mock.first(text) or mock.first(RESURFACE),
                             deadline=DEADLINE, diag=r.diag)
        assert_successor_held(request, before, "Pi")
        if text not in newest_user_text(request.body):
            drained = r.fm("wake", "drain")
            assert text in drained.stdout, f"drain did not present the row: {drained}"
        notices = [e.get("message", "") for e in pi.events()
                   if e.get("type") == "extension_ui_request" and e.get("method") == "notify"]
        restarting = [n for n in notices if "restarting" in n]
        assert len(restarting) == 1, f"one restart notice, never more, never silent: {notices}"
        assert pi.proc.poll() is None, pi.diag()
