"""End to end: the real omp (npm ``@oh-my-pi/pi-coding-agent``, run by Bun from npm ``bun``) in
RPC mode against a loopback mock of the OpenAI chat-completions API, supervised through the shim
``fm install omp`` writes and the ``fm bridge omp`` process it starts.

1. After the first turn a watcher is healthy; a wake appended from outside reaches the model, and
   at the moment the harness sends it, a successor watcher already holds the watcher lock.
2. A session replacement (RPC ``new_session``, omp's ``/new``) issued while a close is pending
   delivers that wake to the model exactly once, and the bridge hears of the replacement.

Skipped only when node/npm are absent. The npm install is cached under ``.e2e-cache/``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from firstmate.testing.procs import eventually

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mock_api import MockApi
from rig import (
    DEADLINE,
    Rig,
    Rpc,
    needs_node,
    npm_install,
    replace_while_close_pending,
    rig,
    rpc_first_turn,
    wake_reaches_model,
)

OMP_VERSION = "18.2.3"
BUN_VERSION = "1.4.5"
pytestmark = [needs_node, pytest.mark.timeout(900)]


def omp_bin() -> Path:
    # 18.2.3 is the newest omp whose sibling packages all resolve from the registry here.
    return npm_install("omp", OMP_VERSION, [f"bun@{BUN_VERSION}",
                                            f"@oh-my-pi/pi-coding-agent@{OMP_VERSION}"], "omp")


def start_omp(r: Rig, mock: MockApi, package: Path | None = None) -> Rpc:
    """omp in RPC mode, its shim from ``fm install omp`` or, given *package*, from that
    directory as an omp plugin (``omp plugin install``) with nothing installed by fm."""
    binary = omp_bin()
    # omp is `#!/usr/bin/env bun`: Bun from the same install must be on PATH.
    r.setup(extra_path=[binary.parent], install=package is None)
    if package is not None:
        done = subprocess.run([str(binary), "plugin", "install", str(package)], cwd=r.project,
                              env=r.env, capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    agent = r.user / ".omp" / "agent"
    agent.mkdir(parents=True)
    (agent / "models.yml").write_text(f"""\
providers:
  mock:
    baseUrl: {mock.openai_url}
    api: openai-completions
    apiKey: sk-dummy
    auth: apiKey
    models: [{{id: mock-model, name: Mock, reasoning: false, input: [text], contextWindow: 200000, maxTokens: 4096}}]
""")
    # Without setupWizard: false a first interactive start asks for a provider login.
    (agent / "config.yml").write_text(
        "startup: {setupWizard: false, showSplash: false, checkUpdate: false, quiet: true}\n")
    mock.probe = r.health_now
    omp = r.rpc([str(binary), "--mode", "rpc", "--model", "mock/mock-model", "--no-session"],
                "omp")
    eventually("omp's ready event", lambda: omp.count("ready"), diag=r.diag, deadline=DEADLINE)
    return omp


def test_wake_reaches_omp_with_a_successor_holding_the_lock(tmp_path: Path,
                                                             mock: MockApi) -> None:
    with rig(tmp_path, "omp") as r:
        omp = start_omp(r, mock)
        first = rpc_first_turn(r, omp, mock)
        wake_reaches_model(r, omp, mock, first, "OMP")


def test_new_session_while_a_close_is_pending_delivers_once(tmp_path: Path,
                                                             mock: MockApi) -> None:
    with rig(tmp_path, "omp") as r:
        omp = start_omp(r, mock)
        first = rpc_first_turn(r, omp, mock)
        replace_while_close_pending(r, omp, mock, first, "OMP")
        # omp 18 replaces a session in place (session_before_switch, session_switch); the shim
        # reports those to the bridge as a shutdown and a start (docs/harnesses/omp.md).
        state = r.bridge_state()
        assert state.get("generation", 0) > 1 and state.get("phase") == "active", (
            "the bridge never heard of omp's session replacement (omp 18.2.3 emits "
            f"session_switch, not session_shutdown/session_start, for /new): {state}")
