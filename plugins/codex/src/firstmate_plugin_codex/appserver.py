"""``fm codex-serve``: wake an idle Codex thread through ``codex app-server`` (opt-in mode).

Codex's hooks can only continue a turn that is ending; ``codex app-server`` can start a new turn
in an idle thread at any time (``turn/start``). In this mode Firstmate runs the app-server as its
child (JSON-RPC lines over stdio), starts or resumes one thread, and is the long-lived re-arm
owner for it: the continuity engine keeps an arm running, and every wake it delivers becomes a
new turn in that thread (after the running turn completes, if one is running).

    fm codex-serve [--cwd DIR] [--thread ID] [--prompt TEXT] [--codex CMD]

Prints ``codex-serve: thread <id>`` once the thread is ready, then one line per event. Ends
(exit 0) when the app-server exits, or on HUP/INT/TERM (128+n), stopping every arm it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

#: Seconds one JSON-RPC request may take.
REQUEST_TIMEOUT = 60.0
#: Seconds a wake waits for a running turn to complete before it is started anyway.
DEFAULT_TURN_WAIT = 600
#: Seconds the first (``--prompt``) turn waits for the watcher to be confirmed.
WATCH_WAIT = 60.0

#: Live clients by owner pid: the plugin's deliver-wake hook sends through the one registered
#: for the session that owns re-arm.
CLIENTS: dict[int, AppServerClient] = {}


class AppServerError(Exception):
    pass


@attrs.define(eq=False)
class AppServerClient:
    """A JSON-RPC client for one ``codex app-server`` child over stdio."""

    proc: subprocess.Popen[bytes]
    thread_id: str = ""
    turn_wait: float = DEFAULT_TURN_WAIT
    _next: int = 0
    _pending: dict[int, tuple[threading.Event, list[dict[str, Any]]]] = attrs.Factory(dict)
    _lock: threading.Lock = attrs.Factory(threading.Lock)
    _send_lock: threading.Lock = attrs.Factory(threading.Lock)
    _idle: threading.Event = attrs.Factory(threading.Event)
    _closed: threading.Event = attrs.Factory(threading.Event)
    turns_started: int = 0

    @classmethod
    def spawn(cls, command: Sequence[str], cwd: str, env: Mapping[str, str]) -> AppServerClient:
        proc = subprocess.Popen([*command, "app-server"], cwd=cwd, env=dict(env),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        client = cls(proc)
        client._idle.set()
        threading.Thread(target=client._read, name="fm-codex-appserver", daemon=True).start()
        return client

    # --- wire --------------------------------------------------------------------------------

    def _write(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        with self._send_lock:
            stdin = self.proc.stdin
            if stdin is None or self._closed.is_set():
                raise AppServerError("codex app-server has exited")
            try:
                stdin.write(data)
                stdin.flush()
            except (OSError, ValueError) as exc:
                raise AppServerError(f"codex app-server did not take a message ({exc})") from exc

    def request(self, method: str, params: dict[str, Any],
                timeout: float = REQUEST_TIMEOUT) -> dict[str, Any]:
        with self._lock:
            self._next += 1
            ident = self._next
            done: tuple[threading.Event, list[dict[str, Any]]] = (threading.Event(), [])
            self._pending[ident] = done
        self._write({"id": ident, "method": method, "params": params})
        if not done[0].wait(timeout):
            raise AppServerError(f"codex app-server did not answer {method} within {timeout:g}s")
        reply = done[1][0]
        if "error" in reply:
            raise AppServerError(f"{method} failed: {json.dumps(reply['error'])[:300]}")
        result = reply.get("result")
        return result if isinstance(result, dict) else {}

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        self._write(message)

    def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            for raw in stdout:
                try:
                    message = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(message, dict):
                    self._dispatch(message)
        finally:
            self._closed.set()
            with self._lock:
                for event, box in self._pending.values():
                    box.append({"error": "codex app-server exited"})
                    event.set()
            self._idle.set()

    def _dispatch(self, message: dict[str, Any]) -> None:
        ident = message.get("id")
        method = message.get("method")
        if method is None and type(ident) is int:
            with self._lock:
                waiting = self._pending.pop(ident, None)
            if waiting is not None:
                waiting[1].append(message)
                waiting[0].set()
            return
        if method is not None and ident is not None:
            # A request from the server (an approval): decline rather than leave it hanging.
            with contextlib.suppress(AppServerError):
                self._write({"id": ident, "error": {"code": -32601,
                                                    "message": "firstmate does not answer this"}})
            return
        if method == "turn/started":
            self._idle.clear()
        elif method == "turn/completed":
            self._idle.set()

    # --- session -----------------------------------------------------------------------------

    def open(self, cwd: str, thread: str | None) -> str:
        self.request("initialize", {"clientInfo": {"name": "firstmate", "version": "0.1"}})
        self.notify("initialized")
        if thread:
            result = self.request("thread/resume", {"threadId": thread})
        else:
            result = self.request("thread/start", {"cwd": cwd})
        found = result.get("thread")
        ident = found.get("id") if isinstance(found, dict) else None
        if not isinstance(ident, str) or not ident:
            raise AppServerError("codex app-server returned no thread id")
        self.thread_id = ident
        return ident

    def start_turn(self, text: str) -> None:
        """Start a new turn with *text*, after the running turn (if any) completes (bounded)."""
        self._idle.wait(self.turn_wait)
        if self._closed.is_set():
            raise AppServerError("codex app-server has exited")
        self._idle.clear()
        try:
            self.request("turn/start", {"threadId": self.thread_id,
                                        "input": [{"type": "text", "text": text}]})
        except AppServerError:
            self._idle.set()
            raise
        self.turns_started += 1

    @property
    def alive(self) -> bool:
        return not self._closed.is_set() and self.proc.poll() is None

    def wait_closed(self, timeout: float | None = None) -> bool:
        return self._closed.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def parser() -> Any:
    """``fm codex-serve``'s command line, in fm's one help and error format."""
    from firstmate.api import CommandParser as Parser

    parser = Parser("fm codex-serve", "Run codex app-server as a child, start or resume one "
                    "thread, and wake it with a new turn for every wake (the opt-in app-server "
                    "mode, docs/harnesses/codex.md). Exit 0 when the app-server exits, 1 when it "
                    "could not start or open the thread, 128+n on a signal.")
    parser.add_argument("--cwd", metavar="DIR",
                        help="the thread's working directory (default: the current directory)")
    parser.add_argument("--thread", metavar="ID", help="resume this thread instead of starting one")
    parser.add_argument("--prompt", metavar="TEXT", help="the first turn's prompt")
    parser.add_argument("--codex", metavar="CMD",
                        help="the codex command line (default: $FM_CODEX_COMMAND, else codex)")
    return parser


def _args(argv: Sequence[str]) -> dict[str, str]:
    command = parser()
    parsed = vars(command.parse(argv))
    for name, value in parsed.items():
        if value == "":
            raise command.usage_error(f"--{name} needs a value")
    return {name: value for name, value in parsed.items() if value is not None}


def serve_lock_check(home: Any) -> str | None:
    """The serve process owns re-arm unless another live session holds the session lock (the
    app-server is our child, so the usual "harness above me" holder rule cannot apply)."""
    from firstmate.api import session_lock

    ins = session_lock.inspect(home)
    if ins.state in ("free", "stale"):
        return None
    if ins.record is not None and session_lock.owned_by_self(ins.record):
        return None
    return f"session lock is {ins.state} (pid {ins.pid}); not re-arming"


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str]) -> int:
    """wake an idle Codex thread through codex app-server (opt-in mode)

    (The first line is the command's one-line help in ``fm help``.)"""
    args = _args(argv)
    from pathlib import Path

    from firstmate.api import open_home

    env = dict(os.environ)
    home = open_home(env)
    cwd = os.path.abspath(args.get("cwd", os.getcwd()))
    if not Path(cwd).is_dir():
        raise parser().usage_error(f"--cwd {cwd} is not a directory")
    command = shlex.split(args.get("codex") or env.get("FM_CODEX_COMMAND", "") or "codex")
    from firstmate.api import stopsignals

    served = _Served()
    try:
        with stopsignals.trapped(_Stop):
            return _serve(served, args, env, home, cwd, command)
    except _Stop as exc:
        return 128 + exc.signum
    finally:
        stopsignals.block()  # stopping every arm and the server: a second stop waits for it
        served.close()


@attrs.define(eq=False)
class _Served:
    """What one ``fm codex-serve`` run started, for its cleanup."""

    client: AppServerClient | None = None
    engine: Any = None

    def close(self) -> None:
        CLIENTS.pop(os.getpid(), None)
        if self.engine is not None:
            self.engine.close(stop_arm=True, detached_too=True)
        if self.client is not None:
            self.client.close()


def _serve(served: _Served, args: Mapping[str, str], env: dict[str, str], home: Any, cwd: str,
           command: list[str]) -> int:
    from firstmate.api import OWNER_ENV, Continuity, Session, env_int

    # The hooks Codex runs under this server see who owns re-arming: their advice then never
    # tells the model to arm by hand (AGENTS.md forbids it in this mode).
    child_env = {**env, OWNER_ENV: f"fm codex-serve (pid {os.getpid()})"}
    try:
        client = served.client = AppServerClient.spawn(command, cwd, child_env)
    except OSError as exc:
        _say(f"codex-serve: FAILED - codex app-server could not start ({exc})")
        return 1
    client.turn_wait = float(env_int(env, "FM_CODEX_SERVE_TURN_WAIT", DEFAULT_TURN_WAIT))
    try:
        thread = client.open(cwd, args.get("thread"))
    except AppServerError as exc:
        _say(f"codex-serve: FAILED - {exc}")
        return 1
    _say(f"codex-serve: thread {thread}")
    CLIENTS[os.getpid()] = client
    engine = served.engine = Continuity.for_session(
        Session(home, "codex", env), display_name="Codex",
        lock_check=lambda: serve_lock_check(home),
        observer=lambda text: _say(f"codex-serve: {text}"))
    refused = engine.start()
    if refused is not None:
        _say(refused)
    if "prompt" in args:
        # Successor first: the first turn starts once a watcher is confirmed, so its own turn
        # end never meets a home with nothing watching.
        if refused is None and not _watching(home, env, WATCH_WAIT):
            _say(f"codex-serve: no watcher confirmed within {WATCH_WAIT:g}s; starting the "
                 "first turn anyway (fm status shows why)")
        client.start_turn(args["prompt"])
    client.wait_closed()
    _say("codex-serve: codex app-server exited")
    return 0


def _watching(home: Any, env: Mapping[str, str], timeout: float) -> bool:
    """Wait (bounded) until a healthy watcher holds *home*'s lock."""
    import time

    from firstmate.api import watcher_health

    deadline = time.monotonic() + timeout
    while not watcher_health(home, env).healthy:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)  # a poll with a deadline: the lock and beacon offer no event here
    return True


def deliver(text: str, owner_pid: int) -> tuple[bool, str] | None:
    """Start a turn with *text* in the thread served for *owner_pid*; None when none is served."""
    client = CLIENTS.get(owner_pid)
    if client is None:
        return None
    try:
        client.start_turn(text)
    except AppServerError as exc:
        return False, str(exc)
    return True, f"turn/start into thread {client.thread_id}"


__all__ = ["CLIENTS", "AppServerClient", "AppServerError", "deliver", "main", "serve_lock_check"]
