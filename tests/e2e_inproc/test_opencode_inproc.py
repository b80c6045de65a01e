"""End to end: the real OpenCode (npm ``opencode-ai``) against a loopback mock of the OpenAI
chat-completions API, supervised through the plugin ``fm install opencode`` writes and the
``fm bridge opencode`` process it starts.

1. ``opencode serve`` driven over HTTP: after the first turn a watcher is healthy; a wake
   appended from outside reaches the model, and at the moment OpenCode sends it a successor
   watcher already holds the watcher lock.
2. ``opencode run`` (headless, disposed after its first idle) starts no bridge and so no
   watcher, and prints the note saying why.

Skipped only when node/npm (or git) are absent. The npm install is cached under ``.e2e-cache/``; the first
start in each project also installs ``@opencode-ai/plugin`` from the npm registry (OpenCode's own
doing, into the project's ``.opencode/``).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import psutil
import pytest
from firstmate.testing.procs import eventually

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mock_api import MockApi, Request
from rig import DEADLINE, Rig, assert_successor_held, needs_node, npm_install, rig, tail

OPENCODE_VERSION = "1.18.33"
pytestmark = [needs_node, pytest.mark.timeout(900),
              pytest.mark.skipif(shutil.which("git") is None,
                                 reason="git is needed: the OpenCode project is a git checkout")]


def opencode_bin() -> Path:
    return npm_install("opencode", OPENCODE_VERSION, [f"opencode-ai@{OPENCODE_VERSION}"],
                       "opencode")


def prepare(r: Rig, mock: MockApi, logged_fm: bool = False, install: bool = True) -> None:
    r.setup(extra_env={"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1"},
            logged_fm=logged_fm, install=install)
    (r.project / "opencode.json").write_text(json.dumps({
        "provider": {"mock": {"npm": "@ai-sdk/openai-compatible", "name": "Mock",
                              "options": {"baseURL": mock.openai_url, "apiKey": "sk-dummy"},
                              "models": {"mock-model": {"name": "Mock Model"}}}},
        # Title generation uses small_model: point it at the mock too.
        "model": "mock/mock-model", "small_model": "mock/mock-model",
        "autoupdate": False, "share": "disabled"}))
    subprocess.run(["git", "init", "-q"], cwd=r.project, check=True, env=r.env)
    mock.probe = r.health_now


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


#: No proxy for the loopback server, whatever the environment says.
LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http(base: str, method: str, path: str, body: object | None = None,
         timeout: float = 120.0) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with LOOPBACK.open(request, timeout=timeout) as response:
        return response.status, response.read()


def answers_doc(base: str) -> bool:
    # GET /session can hang on a fresh server; /doc answers as soon as it listens.
    try:
        # A short timeout: a request that lands while the server is still starting can stall.
        return http(base, "GET", "/doc", timeout=5.0)[0] == 200
    except (OSError, urllib.error.URLError):
        return False


def turn_done(base: str, session: str) -> bool:
    """The session is idle and its newest message is a completed assistant reply (the mock's
    first request is the title request, sent before the turn's own)."""
    statuses = json.loads(http(base, "GET", "/session/status", timeout=30)[1])
    if (statuses.get(session) or {}).get("type", "idle") != "idle":
        return False
    messages = json.loads(http(base, "GET", f"/session/{session}/message", timeout=30)[1])
    info = messages[-1]["info"] if messages else {}
    return info.get("role") == "assistant" and bool((info.get("time") or {}).get("completed"))


def family(pid: int) -> set[int]:
    try:
        root = psutil.Process(pid)
        return {pid, *(child.pid for child in root.children(recursive=True))}
    except psutil.Error:
        return {pid}


def test_serve_wake_reaches_opencode_with_a_successor_holding_the_lock(
        tmp_path: Path, mock: MockApi) -> None:
    binary = opencode_bin()
    with rig(tmp_path, "opencode") as r:
        prepare(r, mock)
        wake_through_serve(r, mock, binary, tmp_path)


@attrs.frozen
class Served:
    """``opencode serve`` after its first turn: the process, its base URL, the watcher the
    bridge armed after the turn, and a failure's diagnostics (its log and the rig's)."""

    proc: subprocess.Popen[bytes]
    base: str
    session: str
    first: int
    diag: Callable[[], str]


def serve_first_turn(r: Rig, mock: MockApi, binary: Path, tmp_path: Path) -> Served:
    """``opencode serve`` in the prepared project, one turn run over HTTP: the shim's bridge
    holds the session lock and armed a healthy watcher after the turn."""
    port = free_port()
    log = tmp_path / "serve.log"
    serve = r.spawn([str(binary), "serve", "--hostname", "127.0.0.1", "--port", str(port)],
                    log)
    base = f"http://127.0.0.1:{port}"

    def diag() -> str:
        return f"rc={serve.poll()} serve log:\n{tail(log)}\n{r.diag()}"

    eventually("opencode serve to answer GET /doc", lambda: answers_doc(base), diag=diag, deadline=DEADLINE)
    # The first request for the project directory loads the plugin (and the shim with it).
    _, created = http(base, "POST", "/session", {})
    session: dict[str, Any] = json.loads(created)
    status, _ = http(base, "POST", f"/session/{session['id']}/prompt_async",
                     {"parts": [{"type": "text", "text": "say hi"}]})
    assert status == 204, status
    eventually("the first turn at the mock", lambda: mock.seen("say hi"), diag=diag, deadline=DEADLINE)
    eventually("the first turn to end", lambda: turn_done(base, session["id"]), diag=diag, deadline=DEADLINE)
    first = eventually("a healthy watcher armed by the bridge", r.watcher, diag=diag, deadline=DEADLINE)
    holder = r.session_lock_pid()
    assert holder in family(serve.pid), f"session lock: {r.status().get('session_lock')}"
    assert r.bridges(), "no fm bridge opencode process is running"
    return Served(serve, base, session["id"], first, diag)


def wake_reaches_serve(r: Rig, mock: MockApi, served: Served, label: str,
                       before: int) -> Request:
    """A wake appended from outside reaches the model, and when OpenCode sent it a successor
    of *before* (the watcher the wake closes) already held the watcher lock. Returns the
    request that carried it."""
    text = f"{label}-{uuid.uuid4().hex[:8]}"
    r.wake(f"signal: builder done: {text}")
    request = eventually(f"the mock to receive {text}", lambda: mock.first(text), diag=served.diag, deadline=DEADLINE)
    assert_successor_held(request, before, "OpenCode")
    return request


def wake_through_serve(r: Rig, mock: MockApi, binary: Path, tmp_path: Path) -> None:
    """``opencode serve`` in the prepared project: a first turn arms a watcher through the shim,
    and a wake reaches the model with a successor already holding the watcher lock."""
    served = serve_first_turn(r, mock, binary, tmp_path)
    wake_reaches_serve(r, mock, served, "WAKE-OC", served.first)
    assert eventually("a healthy successor after the wake turn", lambda: r.successor(served.first), deadline=DEADLINE)
    assert served.proc.poll() is None, served.diag()


def test_run_mode_starts_no_bridge_and_says_so(tmp_path: Path, mock: MockApi) -> None:
    binary = opencode_bin()
    with rig(tmp_path, "opencode") as r:
        # The logging `fm` wrapper is the bridge command, so any start of the bridge is on record.
        prepare(r, mock, logged_fm=True)
        log = tmp_path / "run.log"
        run = r.spawn([str(binary), "run", "say hi"], log)
        try:
            code = run.wait(timeout=300)
        except subprocess.TimeoutExpired:
            pytest.fail(f"opencode run did not finish:\n{tail(log)}")
        output = log.read_text(errors="replace")
        assert code == 0, output[-3000:]
        assert mock.seen("say hi"), "opencode run never reached the mock"
        assert not r.bridge_calls(), f"opencode run started a bridge: {r.bridge_calls()}"
        assert not r.bridge_state(), f"a bridge recorded state: {r.bridge_state()}"
        assert (r.status().get("watcher") or {}).get("state") == "none", r.status()
        assert "opencode serve" in output, f"no note about supervision in:\n{output[-3000:]}"
