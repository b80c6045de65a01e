"""What the spawned-crew end-to-end tests share (tests/e2e/test_crew_claude_e2e.py and
tests/e2e_inproc/test_crew_pi_inproc.py).

- :class:`ToolMock`: a loopback Anthropic Messages API (Claude Code and Pi both speak it) that
  answers a crew's brief with one tool call running the status command the brief names (as a
  model following the brief would), and everything else with a short text turn.
- :func:`serve_messages`: the loopback server under it, for a test's own scripted model.
- :class:`CrewRig`: a scratch project, Firstmate home and private tmux server; an ``fm`` wrapper
  the crew is spawned with (``--fm-command``) that logs every call with the caller's ``FM_CREW``;
  the primary's real ``fm arm``; and the checks that the crew's session never armed a watcher.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import attrs
import psutil
from firstmate.store.home import Home
from firstmate.testing.procs import SpawnedArm, eventually, spawn_arm

T = TypeVar("T")
#: What the brief's reporting line looks like: ``<fm> crew status NAME "<verb>: <note>"``.
BRIEF_COMMAND = re.compile(r'(\S+) crew status (\S+) "<verb>: <note>"')
DEADLINE = 45.0


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(part.get("text", "")) if isinstance(part, dict) else str(part)
                         for part in content)
    return ""


def _sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n"
                   for name, data in events).encode()


def _message(model: str, blocks: list[tuple[dict[str, Any], dict[str, Any]]],
             stop: str) -> bytes:
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {
        "type": "message_start", "message": {
            "id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1}}})]
    for index, (start, delta) in enumerate(blocks):
        events += [
            ("content_block_start", {"type": "content_block_start", "index": index,
                                     "content_block": start}),
            ("content_block_delta", {"type": "content_block_delta", "index": index,
                                     "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    events += [("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": stop, "stop_sequence": None},
                                  "usage": {"output_tokens": 5}}),
               ("message_stop", {"type": "message_stop"})]
    return _sse(events)


def serve_messages(answer: Callable[[dict[str, Any]], bytes], bodies: list[dict[str, Any]],
                   lock: threading.Lock) -> ThreadingHTTPServer:
    """A loopback Anthropic Messages API, serving in a thread of its own: every request body is
    appended to *bodies* and answered with ``answer(body)`` (a stream of events), both under
    *lock*, so a scripted model sees one request at a time."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: Any) -> None:
            pass

        def _send(self, code: int, kind: str, data: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_HEAD(self) -> None:
            self._send(200, "application/json", b"")

        def do_GET(self) -> None:
            self._send(200, "application/json", b"{}")

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if "count_tokens" in self.path:
                self._send(200, "application/json", b'{"input_tokens": 10}')
                return
            try:
                body = json.loads(raw)
            except ValueError:
                body = {}
            if not isinstance(body, dict):
                body = {}
            with lock:
                bodies.append(body)
                reply = answer(body)
            self._send(200, "text/event-stream", reply)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@attrs.define(eq=False)
class ToolMock:
    """See the module docstring. :attr:`note` is the text of the status line the tool call
    reports (``done: <note>``)."""

    note: str
    server: ThreadingHTTPServer | None = None
    bodies: list[dict[str, Any]] = attrs.Factory(list)
    tool_calls: list[str] = attrs.Factory(list)
    lock: threading.Lock = attrs.Factory(threading.Lock)

    @property
    def root(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, body: dict[str, Any]) -> bytes:
        model = str(body.get("model") or "mock-model")
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        # The newest turn: every message after the last assistant one (a harness may send the
        # prompt and its own reminders as separate user messages).
        turn: list[dict[str, Any]] = []
        for message in reversed(messages):
            if message.get("role") == "assistant":
                break
            turn.insert(0, message)
        tools = [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]
        bash = next((name for name in tools if name.lower() == "bash"), None)
        after_tool = any(isinstance(m.get("content"), list) and any(
            isinstance(part, dict) and part.get("type") == "tool_result"
            for part in m["content"]) for m in turn)
        found = BRIEF_COMMAND.search("\n".join(_text(m.get("content")) for m in turn))
        if bash and found and not after_tool and turn:
            command = f'{found.group(1)} crew status {found.group(2)} "done: {self.note}"'
            self.tool_calls.append(command)  # (answer runs under self.lock)
            # Claude Code's Bash takes a description too; Pi's bash only the command.
            extra = {"description": "Report to the captain"} if bash == "Bash" else {}
            call = json.dumps({"command": command, **extra})
            return _message(model, [(
                {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:16]}", "name": bash,
                 "input": {}},
                {"type": "input_json_delta", "partial_json": call})], "tool_use")
        return _message(model, [({"type": "text", "text": ""},
                                 {"type": "text_delta", "text": "OK-DONE"})], "end_turn")

    def start(self) -> ToolMock:
        self.server = serve_messages(self.answer, self.bodies, self.lock)
        return self

    def describe(self) -> str:
        """Each request in short: its tools and the tail of its newest message (diagnostics)."""
        with self.lock:
            bodies = list(self.bodies)
        lines = []
        for body in bodies:
            tools = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
            messages = body.get("messages") or [{}]
            lines.append(f"tools={tools[:12]} last={json.dumps(messages[-1])[-600:]}")
        return "\n".join(lines)

    def seen(self, text: str) -> bool:
        with self.lock:
            return any(text in json.dumps(body) for body in self.bodies)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@attrs.define(eq=False)
class CrewRig:
    """See the module docstring. Call :meth:`setup` with the environment the harness needs."""

    tmp: Path
    env: dict[str, str] = attrs.Factory(dict)
    socket: str = attrs.field(factory=lambda: f"fm-crew-e2e-{uuid.uuid4().hex[:10]}")
    #: Every primary arm this test started, the newest last.
    arms: list[SpawnedArm] = attrs.Factory(list)

    @property
    def project(self) -> Path:
        return self.tmp / "project"

    @property
    def user(self) -> Path:
        return self.tmp / "user"

    @property
    def home(self) -> Home:
        return Home(self.tmp / "fmhome")

    @property
    def fm_wrapper(self) -> Path:
        return self.tmp / "bin" / "fm"

    @property
    def calls_log(self) -> Path:
        return self.tmp / "bin" / "calls.log"

    def setup(self, paths: list[str], extra_path: list[Path], extra_env: dict[str, str]) -> None:
        """The scratch directories, the logging ``fm`` wrapper and the environment every
        command of the test runs with (*paths* go on ``PYTHONPATH``)."""
        for path in (self.project, self.user, self.fm_wrapper.parent):
            path.mkdir(parents=True, exist_ok=True)
        self.home.ensure()
        self.fm_wrapper.write_text(
            "#!/bin/sh\n"
            f'printf "%s|%s|%s\\n" "$$" "${{FM_CREW:-}}" "$*" >> "{self.calls_log}"\n'
            f'exec "{sys.executable}" -m firstmate "$@"\n')
        self.fm_wrapper.chmod(0o755)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("FM_", "FIRSTMATE_PLUGINS", "CLAUDE", "ANTHROPIC", "PI_", "OMP_",
                                    "OPENCODE_", "CODEX_"))
               and k not in ("TMUX", "TMUX_PANE")}
        search = [str(self.fm_wrapper.parent), *(str(p) for p in extra_path), env.get("PATH", "")]
        pythonpath = [*paths, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env.update(HOME=str(self.user), PATH=os.pathsep.join(search),
                   PYTHONPATH=os.pathsep.join(pythonpath), FM_HOME=str(self.home.root),
                   FM_TMUX_SOCKET=self.socket, FM_SIGNAL_GRACE="0", NO_COLOR="1",
                   TERM="xterm-256color", LANG=env.get("LANG", "C.UTF-8"), **extra_env)
        for name in ("NO_PROXY", "no_proxy"):
            env[name] = ",".join(filter(None, [env.get(name, ""), "127.0.0.1", "localhost"]))
        self.env = env

    def fm(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "firstmate", *args], env=self.env,
                              cwd=self.project, capture_output=True, text=True, timeout=90,
                              check=False)

    def arm_primary(self) -> SpawnedArm:
        """The primary's real ``fm arm`` in this home (no ``FM_CREW``): its watcher runs."""
        arm = spawn_arm(self.home, self.tmp, env=self.env)
        self.arms.append(arm)
        assert arm.status.startswith("watcher: started"), arm.status
        return arm

    def turn_end_wakes(self, name: str, harness: str, *args: str, deadline: float = 60) -> str:
        """Spawn *harness* as crew *name* (*args* go to ``fm crew spawn``) under the primary's
        ``fm arm`` and return the reason it closes with: the crew's first turn end, within
        *deadline* seconds of the spawn."""
        arm = self.arm_primary()
        done = self.fm("crew", "spawn", name, "--harness", harness, "--cwd", str(self.project),
                       "--fm-command", str(self.fm_wrapper), *args, "--", "Say hello.")
        assert done.returncode == 0, f"fm crew spawn: {done.stderr}{done.stdout}"
        reason = arm.wait_reason(deadline=deadline)
        assert reason == f"signal: {name}.turn-ended", f"{reason}\n{self.diag(name)}"
        calls = [args for _pid, crew, args in self.calls() if crew == name]
        assert f"crew turn-ended {name}" in calls, calls
        self.handle_wake()
        self.assert_crew_never_armed(name)
        return reason

    def handle_wake(self) -> str:
        """Play the primary's part of a handled wake: drain, then acknowledge as printed."""
        import shlex

        drained = self.fm("wake", "drain")
        found = re.search(r"WAKE_ACK_REQUIRED: after handling completes run (.+)", drained.stderr)
        assert found, drained.stderr
        words = shlex.split(found.group(1))
        acked = self.fm(*words[1:])
        assert acked.returncode == 0, acked.stderr
        return drained.stdout

    def steered_turn_wakes(self, name: str, diag: Callable[[], str]) -> str:
        """Steer the crew into a plain turn (no report), re-arm the primary and return the
        reason the watcher closes with: the crew's harness recorded that turn's end. The steer
        goes first: an idle crew whose screen held still for ``FM_POLL`` seconds is stale, by
        design, and a watcher armed before the steer redraws it may rightly close on that."""
        if not self.turn_end_seen(name):
            # The first turn's end came after the first cycle closed and after the drain read
            # the crew's log (asked before arming: a watcher may take it at once): a cycle
            # wakes for it first.
            reason = self.arm_primary().wait_reason(deadline=60)
            assert reason.startswith(f"signal: {name}."), f"{reason}\n{diag()}"
            self.handle_wake()
        before = (self.home.crew_dir / f"{name}.turn-ended").read_text()
        screen = self.screen(name)
        steered = self.fm("crew", "steer", name, "Say hello once more.")
        assert steered.returncode == 0, steered.stderr
        eventually("the steered crew's screen to change",
                   lambda: self.screen(name) != screen,
                   deadline=DEADLINE, diag=diag)
        # (A turn that ends before the watcher starts is taken at its first poll.)
        arm = self.arm_primary()
        reason = arm.wait_reason(deadline=60)
        assert reason == f"signal: {name}.turn-ended", f"{reason}\n{diag()}"
        assert (self.home.crew_dir / f"{name}.turn-ended").read_text() != before
        self.handle_wake()
        return reason

    def turn_end_seen(self, name: str) -> bool:
        """Whether crew *name*'s turn-end marker, as it is now, wakes no watcher: a watcher's
        status source took it (``NAME.turn-seen``), or a drain showed it with the crew's lines
        (the turn signature in its presentation mark, ``NAME.drain-cursor``)."""
        from firstmate.fast import crewlog
        from firstmate.store import crew

        signature = crew.turn_signature(self.home, name)
        if signature is None:
            return False
        seen = self.home.crew_dir / f"{name}.turn-seen"
        if seen.exists() and seen.read_text().strip() == signature[0]:
            return True
        mark = crewlog.read_mark(str(self.home.crew_dir / f"{name}.drain-cursor"))
        return mark is not None and mark[1] == signature[0]

    def spawn(self, name: str, harness: str, task: str) -> str:
        done = self.fm("crew", "spawn", name, "--harness", harness, "--cwd", str(self.project),
                       "--fm-command", str(self.fm_wrapper), "--", task)
        assert done.returncode == 0, f"fm crew spawn: {done.stderr}{done.stdout}"
        return done.stdout

    def pane(self, name: str) -> str:
        """The pane crew *name* is bound to (its registration's first line; the lines after it
        are its label and program)."""
        from firstmate.store import crew

        return crew.get(self.home, name).pane

    def screen(self, name: str) -> str:
        """The crew's screen as tmux captures it, or why it could not be captured."""
        try:
            pane = self.pane(name)
        except Exception as exc:  # (a diagnostic: say what went wrong instead)
            return f"(no pane: {exc})"
        done = subprocess.run(["tmux", "-L", self.socket, "capture-pane", "-p", "-t", pane],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return f"(tmux capture-pane -t {pane} failed: {done.stderr.strip()})"
        return done.stdout if done.stdout.strip() else f"(pane {pane} is blank)"

    def calls(self) -> list[tuple[int, str, str]]:
        """Every ``fm`` call through the wrapper: (pid, FM_CREW of the caller, arguments)."""
        if not self.calls_log.exists():
            return []
        found = []
        for line in self.calls_log.read_text().splitlines():
            pid, crew, args = line.split("|", 2)
            found.append((int(pid), crew, args))
        return found

    def diag(self, name: str) -> str:
        status = self.home.crew_dir / f"{name}.status"
        triage = self.home.logs / "triage.log"
        state = self.home.crew_dir / f"{name}.pane-state"
        return (f"calls: {self.calls()[-20:]}\n"
                f"status log: {status.read_text() if status.exists() else '(none)'}\n"
                f"arm stderr: {self.arms[-1].stderr()[-1500:] if self.arms else ''}\n"
                f"triage log: {triage.read_text()[-1500:] if triage.exists() else '(none)'}\n"
                f"pane state: {state.read_text().strip() if state.exists() else '(none)'}\n"
                f"screen:\n{self.screen(name)[-2500:]}")

    def assert_crew_never_armed(self, name: str) -> None:
        """No ``fm arm`` or ``fm watch`` ran from the crew's session (every ``fm`` the crew's
        harness and model ran went through the wrapper), none is running with its ``FM_CREW``,
        and every watcher cycle in the cycle log is the primary's arm's."""
        crew_calls = [args for _pid, crew, args in self.calls() if crew == name]
        assert crew_calls, "the crew ran no fm command at all"
        armed = [args for args in crew_calls if args.split(" ", 1)[0] in ("arm", "watch")]
        assert not armed, f"the crew's session armed a watcher: {armed}"
        for proc in psutil.process_iter(["pid", "cmdline"]):
            with contextlib.suppress(psutil.Error):
                words = proc.info["cmdline"] or []
                if "firstmate" in " ".join(words) and ("arm" in words or "watch" in words) \
                        and proc.environ().get("FM_CREW") == name:
                    raise AssertionError(f"a watcher process of the crew: {words}")
        # An arm relays its reason the moment the watcher prints it and writes the cycle's row
        # only after the watcher exits: every row is written once every arm has exited.
        for arm in self.arms:
            assert arm.wait(deadline=30) == 0, arm.stderr()
        rows = (self.home.logs / "cycle-exits.tsv").read_text().splitlines()
        arms = {field.split("=", 1)[1] for row in rows for field in row.split("\t")
                if field.startswith("arm_pid=")}
        assert arms == {str(arm.pid) for arm in self.arms}, f"cycles of other arms: {rows}"

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            for member in list(self.home.crew_dir.glob("*.pane")):
                self.fm("crew", "stop", member.name[: -len(".pane")])
        for arm in self.arms:
            arm.stop()
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True,
                       check=False)
