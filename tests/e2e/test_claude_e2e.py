"""End to end: the real Claude Code (npm ``@anthropic-ai/claude-code``) against a loopback mock
model API, supervised by Firstmate's Claude plugin exactly as a user would set it up.

``fm install claude`` and ``fm crew add`` prepare a project; Claude starts in tmux with a scratch
``HOME``; its SessionStart hook takes the session lock and the Stop hook arms the watcher. Then:

1. a durable wake (``fm wake append``) must reach the mock inside Claude's next request, and a
   handling successor watcher must hold the watcher lock afterwards;
2. a second wake proves the re-arm after the handled turn; the mock answers that wake's request
   with an API error, so the turn ends in ``StopFailure``;
3. a third wake proves the ``StopFailure`` hook re-armed the watcher.

The npm install is cached under ``.e2e-cache/`` in the checkout. Skips only without node/npm
(or tmux, which drives the TUI).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import pytest
from firstmate.testing import procs

REPO = Path(__file__).resolve().parents[2]
VERSION = "2.1.328"
CACHE = REPO / ".e2e-cache" / f"claude-{VERSION}"
DEADLINE = 60.0

pytestmark = [
    pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                       reason="node/npm are not installed: the real Claude Code cannot run"),
    pytest.mark.skipif(shutil.which("tmux") is None,
                       reason="tmux is not installed: the Claude TUI cannot be driven"),
    pytest.mark.timeout(300),
]


# --- the mock model API ---------------------------------------------------------------------------


class Mock:
    """Records every request body; answers with one streamed ``OK-DONE`` text message, except
    that requests containing :attr:`fail_on` (while it is set) get an API error."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        self.errors_sent: list[str] = []
        self.fail_on: tuple[str, ...] | None = None
        self.lock = threading.Lock()
        mock = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                self._json(200, {})

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size).decode("utf-8", "replace")
                if "count_tokens" in self.path:
                    self._json(200, {"input_tokens": 10})
                    return
                with mock.lock:
                    mock.bodies.append(body)
                    # Every request carrying the marker fails until the test clears it (Claude
                    # retries a failed request in a few shapes before the turn ends in error).
                    fail = mock.fail_on is not None and any(m in body for m in mock.fail_on)
                    if fail:
                        mock.errors_sent.append(body)
                if fail:
                    self._json(400, {"type": "error", "error": {
                        "type": "invalid_request_error", "message": "mock: scripted API error"}})
                    return
                self._stream()

            def _json(self, code: int, obj: object) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self) -> None:
                events = [
                    ("message_start", {"type": "message_start", "message": {
                        "id": "msg_mock", "type": "message", "role": "assistant",
                        "model": "claude-mock", "content": [], "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {"input_tokens": 10, "output_tokens": 1}}}),
                    ("content_block_start", {"type": "content_block_start", "index": 0,
                                             "content_block": {"type": "text", "text": ""}}),
                    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "text_delta", "text": "OK-DONE"}}),
                    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    ("message_delta", {"type": "message_delta",
                                       "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                       "usage": {"output_tokens": 2}}),
                    ("message_stop", {"type": "message_stop"}),
                ]
                data = b"".join(f"event: {name}\ndata: {json.dumps(obj)}\n\n".encode()
                                for name, obj in events)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def seen(self, text: str) -> bool:
        with self.lock:
            return any(text in body for body in self.bodies)

    def seen_since(self, index: int, *texts: str) -> bool:
        """Whether a request after the first *index* ones carried any of *texts*."""
        with self.lock:
            return any(text in body for body in self.bodies[index:] for text in texts)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- helpers -------------------------------------------------------------------------------------


CONTEXT: list[Any] = []


def eventually(what: str, check: Any, deadline: float = DEADLINE) -> Any:
    """The tests' polling helper with this test's longer deadline, its failure naming CONTEXT."""
    return procs.eventually(what, check, deadline, interval=0.2,
                            diag=lambda: "; ".join(str(f()) for f in CONTEXT))


def claude_bin() -> Path:
    """Install Claude Code into the cache once; later runs reuse it."""
    binary = CACHE / "node_modules" / ".bin" / "claude"
    if not binary.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent",
                        f"@anthropic-ai/claude-code@{VERSION}"], cwd=CACHE, check=True,
                       timeout=240, stdin=subprocess.DEVNULL)
    return binary


def fm_shim(bindir: Path) -> None:
    """``fm`` on PATH for the hooks Claude runs: this interpreter, this checkout."""
    bindir.mkdir(parents=True, exist_ok=True)
    shim = bindir / "fm"
    log = bindir / "calls.log"
    shim.write_text(f'#!/bin/sh\necho "$(date +%T.%N) $*" >> {log}\n'
                    f'exec {sys.executable} -m firstmate "$@"\n')
    shim.chmod(0o755)


@contextlib.contextmanager
def tmux_session(socket_name: str, cwd: Path, env: dict[str, str],
                 argv: list[str]) -> Iterator[str]:
    name = "fm-e2e"
    exports = " ".join(f"{k}={_q(v)}" for k, v in sorted(env.items()))
    command = f"env -i {exports} {' '.join(_q(a) for a in argv)}"
    subprocess.run(["tmux", "-L", socket_name, "new-session", "-d", "-x", "200", "-y", "50",
                    "-s", name, "-c", str(cwd), command], check=True)
    try:
        yield name
    finally:
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], check=False,
                       capture_output=True)


def _q(text: str) -> str:
    import shlex

    return shlex.quote(text)


def capture(socket_name: str, target: str) -> str:
    done = subprocess.run(["tmux", "-L", socket_name, "capture-pane", "-p", "-t", target],
                          capture_output=True, text=True, check=False)
    return done.stdout


def fm(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "firstmate", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


def status(env: dict[str, str]) -> dict[str, Any]:
    done = fm(env, "status", "--json")
    value: dict[str, Any] = json.loads(done.stdout)
    return value


def healthy_watcher(env: dict[str, str]) -> int | None:
    watcher = status(env).get("watcher") or {}
    return watcher.get("pid") if watcher.get("healthy") else None


def kv(home: Path, key: str) -> str | None:
    import sqlite3

    conn = sqlite3.connect(home / "state" / "firstmate.db")
    try:
        row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
    except sqlite3.OperationalError:
        return None  # (no hook has run yet: the home has no tables)
    finally:
        conn.close()
    return None if row is None else str(row[0])


def _last_user_text(body: str) -> str:
    try:
        messages = json.loads(body).get("messages") or []
    except ValueError:
        return body[-400:]
    return json.dumps(messages[-1])[-2000:] if messages else ""


def handle_wake(env: dict[str, str]) -> str:
    """Play the model's part of a handled wake: drain, then run the printed acknowledgement."""
    import shlex

    drained = fm(env, "wake", "drain")
    found = re.search(r"WAKE_ACK_REQUIRED: after handling completes run (.+)", drained.stderr)
    assert found, drained.stderr
    words = shlex.split(found.group(1))
    assert words[:3] == ["fm", "wake", "drain"], words
    acked = fm(env, *words[1:])
    assert acked.returncode == 0, acked.stderr
    return drained.stdout


def parked(home: Path, after: int) -> int | None:
    """The epoch of an open auto-arm claim newer than *after* (a Stop hook parked on the arm)."""
    raw = kv(home, "claude.autoarm")
    entry = json.loads(raw) if raw else {}
    epoch = entry.get("epoch")
    if entry.get("outcome") == "arming" and isinstance(epoch, int) and epoch > after:
        return epoch
    return None


# --- the test --------------------------------------------------------------------------------------


def test_real_claude_is_woken_rearmed_and_survives_stop_failure(tmp_path: Path) -> None:
    claude = claude_bin()
    scratch_home = tmp_path / "userhome"
    project = tmp_path / "project"
    home = tmp_path / "fmhome"
    bindir = tmp_path / "bin"
    for d in (scratch_home, project):
        d.mkdir()
    fm_shim(bindir)
    pythonpath = os.pathsep.join([str(REPO / "core"), str(REPO / "plugins" / "claude" / "src"),
                                  *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    mock = Mock()
    (scratch_home / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True, "theme": "dark",
        # (the firstmate MCP server fm install registers in .mcp.json, when this fm has the
        # MCP SDK, is approved by the install itself: no question holds up the start)
        "projects": {str(project): {"hasTrustDialogAccepted": True}},
        "customApiKeyResponses": {"approved": ["sk-dummy"], "rejected": []},
    }))
    base_env = {
        "HOME": str(scratch_home),
        "PATH": os.pathsep.join([str(bindir), os.environ.get("PATH", "/usr/bin:/bin")]),
        "PYTHONPATH": pythonpath,
        "TERM": "xterm-256color",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    fm_env = {**base_env, "FM_HOME": str(home)}
    claude_env = {
        **base_env,
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{mock.port}",
        "ANTHROPIC_API_KEY": "sk-dummy",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # StopFailure pacing is exercised, not waited out for 15 s.
        "FM_CLAUDE_STOPFAILURE_COOLDOWN_MS": "500",
    }
    socket_name = f"fm-e2e-{os.getpid()}"
    try:
        done = fm(fm_env, "install", "claude", "--project", str(project), "--home", str(home),
                  cwd=project)
        assert done.returncode == 0, done.stderr
        done = fm(fm_env, "crew", "add", "builder", "--pane", "%9999", cwd=project)
        assert done.returncode == 0, done.stderr

        with tmux_session(socket_name, project, claude_env, [str(claude)]) as target:
            CONTEXT[:] = [
                lambda: "hook calls: " + (bindir / "calls.log").read_text()[-1500:]
                if (bindir / "calls.log").exists() else "no hook calls",
                lambda: f"ledger: {kv(home, 'claude.autoarm')}",
                lambda: "last user content at the mock: " + " || ".join(
                    _last_user_text(b)[-400:] for b in mock.bodies[-4:]),
                lambda: "pane: " + capture(socket_name, target)[-1500:],
                lambda: "fm status: " + fm(fm_env, "status").stdout[-1500:],
            ]
            eventually("the Claude prompt", lambda: "❯" in capture(socket_name, target))
            lock = eventually("the SessionStart hook's session lock",
                              lambda: "held by live harness" in fm(fm_env, "lock", "status").stdout
                              and fm(fm_env, "lock", "status").stdout)
            # Nothing asked before the session started (the install approved its MCP server).
            assert "MCP server" not in capture(socket_name, target)
            subprocess.run(["tmux", "-L", socket_name, "send-keys", "-t", target,
                            "hello from the e2e test", "Enter"], check=True)
            eventually("the first user turn at the mock", lambda: mock.seen("hello from the e2e"))
            # The SessionStart hook's context reached the model, and the lock names Claude itself.
            assert mock.seen("Firstmate supervises the crews of this home")
            holder = int(re.search(r"pid ([0-9]+)", lock).group(1))  # type: ignore[union-attr]
            assert "claude" in " ".join(psutil.Process(holder).cmdline())
            first = eventually("a watcher armed by the Stop hook", lambda: healthy_watcher(fm_env))
            epoch = eventually("a parked Stop hook", lambda: parked(home, 0))

            # 1. A wake reaches the model; a handling successor holds the watcher lock.
            fm(fm_env, "wake", "append", "signal", "builder", "signal: builder done: E2E-WAKE-ONE")
            eventually("wake one at the mock", lambda: mock.seen("E2E-WAKE-ONE"))
            successor = eventually("a successor watcher",
                                   lambda: (pid := healthy_watcher(fm_env)) and pid != first and pid)
            assert successor != first
            assert "E2E-WAKE-ONE" in handle_wake(fm_env)

            # 2. After the handled turn the Stop hook re-armed: a second wake arrives. The mock
            # answers it with an API error, so that turn ends in StopFailure.
            # Under load the wake can reach the model as its own reason line or, when a fresh
            # (non-successor) watcher finds it queued at start, as `check: rearm-resurface`
            # whose drain presents the row: either way it is delivered, never lost.
            mock.fail_on = ("E2E-WAKE-TWO", "check: rearm-resurface")
            epoch = eventually("the Stop hook of the handled turn", lambda: parked(home, epoch))
            fm(fm_env, "wake", "append", "signal", "builder",
               "signal: builder blocked: E2E-WAKE-TWO")
            eventually("wake two at the mock", lambda: mock.seen("E2E-WAKE-TWO")
                       or mock.seen("check: rearm-resurface"))
            eventually("the scripted API error", lambda: mock.errors_sent)
            assert "E2E-WAKE-TWO" in handle_wake(fm_env)  # the row itself is presented

            # 3. The StopFailure hook claimed the next cycle and re-armed.
            eventually("a StopFailure-driven claim", lambda: kv(home, "claude.autoarm.stopfailure_at"))
            mock.fail_on = None
            epoch = eventually("the StopFailure hook parked", lambda: parked(home, epoch))
            third_before = eventually("a watcher after StopFailure", lambda: healthy_watcher(fm_env))
            sent = len(mock.bodies)
            fm(fm_env, "wake", "append", "signal", "builder", "signal: builder done: E2E-WAKE-THREE")
            # As with wake two: when the StopFailure hook's arm starts a fresh watcher after the
            # append, the row reaches the model as `check: rearm-resurface`, and the drain that
            # wake asks for presents it.
            eventually("wake three at the mock",
                       lambda: mock.seen_since(sent, "E2E-WAKE-THREE", "check: rearm-resurface"))
            eventually("a successor after wake three",
                       lambda: (pid := healthy_watcher(fm_env)) and pid != third_before)
            assert "E2E-WAKE-THREE" in handle_wake(fm_env)  # the row itself is presented

            wake_bodies = [b for b in mock.bodies if "E2E-WAKE-ONE" in b]
            evidence = tmp_path.parent / "claude-e2e-evidence.txt"
            with contextlib.suppress(OSError):
                evidence.write_text(f"lock: {lock}\nrequests: {len(mock.bodies)}\n"
                                    "newest message of the first wake request:\n"
                                    f"{_last_user_text(wake_bodies[0])}\n")
            assert "FIRSTMATE_OP:" in wake_bodies[0]
            assert "fm wake drain" in wake_bodies[0]
    finally:
        fm(fm_env, "arm", "--stop")
        mock.close()
