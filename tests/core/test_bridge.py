"""``fm bridge``: a real bridge process, real arms and watchers, the test playing the shim.

Two throwaway harness plugins give the bridge its profile: ``bridgepi`` keeps its arm across a
session handoff (like Pi), ``bridgeomp`` retires it at shutdown (like omp). The test process is
the harness: it spawns the bridge, so it is the session-lock holder.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from firstmate.store.health import watcher_health
from firstmate.store.home import Home
from firstmate.testing.procs import eventually
from watch_support import CORE, bridge_plugin


class Shim:
    """The test's side of the protocol: send lines, collect what the bridge writes."""

    def __init__(self, proc: subprocess.Popen[bytes], cwd: Path) -> None:
        self.proc = proc
        #: The harness's working directory the hello names (the bridge's own): a plain
        #: directory, whatever directory the tests run from (a linked git worktree is a crew's).
        self.cwd = cwd
        self.inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.ids = 0
        self.generation = 0
        #: Messages a request() read past while waiting for its reply.
        self.held: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.inbox.put(json.loads(line))

    def send(self, kind: str, **fields: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"type": kind, **fields}) + "\n").encode())
        self.proc.stdin.flush()

    def raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def next(self, kind: str | None = None, deadline: float = 60.0) -> dict[str, Any]:
        """The next message (of *kind*, others are kept in ``seen``)."""
        for msg in list(self.held):
            if kind is None or msg["type"] == kind:
                self.held.remove(msg)
                return msg
        end = time.monotonic() + deadline
        while True:
            left = end - time.monotonic()
            assert left > 0, f"no {kind or 'message'} from the bridge within {deadline}s"
            try:
                msg = self.inbox.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(msg)
            if kind is None or msg["type"] == kind:
                return msg

    def pending(self) -> list[dict[str, Any]]:
        """Messages already written and not yet read (no waiting)."""
        out, self.held = self.held, []
        while True:
            try:
                out.append(self.inbox.get_nowait())
            except queue.Empty:
                return out

    def request(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.ids += 1
        ident = f"r-{self.ids}"
        self.send(kind, id=ident, **fields)
        while True:
            msg = self.inbox.get(timeout=60)
            self.seen.append(msg)
            if msg.get("id") == ident and msg["type"] in ("reply", "error"):
                return msg
            self.held.append(msg)

    def start(self, reason: str = "startup") -> dict[str, Any]:
        self.generation += 1
        return self.request("session_start", generation=self.generation, reason=reason,
                            session="s-1")

    def answer(self, deliver: dict[str, Any], ok: bool = True, detail: str = "") -> None:
        self.send("delivered", id=deliver["id"], ok=ok, detail=detail)

    def hello(self) -> dict[str, Any]:
        self.send("hello", protocol=1, harness="x", shim="test", pid=os.getpid(),
                  cwd=str(self.cwd), argv=[], restart=False)
        return self.next("welcome")


@pytest.fixture
def plugins(tmp_path: Path) -> Path:
    where = tmp_path / "plugins"
    where.mkdir()
    bridge_plugin(where, "bridgepi", retire=False, idle=False)
    bridge_plugin(where, "bridgeomp", retire=True, idle=True)
    return where


def _env(home: Home, plugins: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(FM_HOME=str(home.root), FM_SIGNAL_GRACE="0", FM_TMUX="/nonexistent/tmux",
               FM_SESSION_HOLDER_PID=str(os.getpid()), FM_STANDIN_QUEUE_TICK_MS="300",
               PYTHONPATH=os.pathsep.join([str(plugins), str(CORE)]), **extra)
    return env


def _fm(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "firstmate", *args], env=env, text=True,
                          capture_output=True, timeout=60, check=False)


@pytest.fixture
def bridge(fm_home: Home, plugins: Path, tmp_path: Path,
           request: pytest.FixtureRequest) -> Iterator[tuple[Shim, dict[str, str]]]:
    harness = getattr(request, "param", "bridgepi")
    env = _env(fm_home, plugins)
    proc = subprocess.Popen([sys.executable, "-m", "firstmate", "bridge", harness],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                            cwd=tmp_path)
    shim = Shim(proc, tmp_path)
    try:
        yield shim, env
    finally:
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        _fm(env, "arm", "--stop")


def _watcher(home: Home) -> int | None:
    health = watcher_health(home, {})
    return health.pid if health.healthy else None


def _crew(env: dict[str, str]) -> None:
    done = _fm(env, "crew", "add", "builder", "--pane", "%99999")
    assert done.returncode == 0, done.stderr


def _append(env: dict[str, str], text: str) -> None:
    done = _fm(env, "wake", "append", "signal", "builder", text)
    assert done.returncode == 0, done.stderr


def _drain_ack(env: dict[str, str]) -> None:
    """Handle the wake as a model would: drain, then run the acknowledgement it asks for."""
    drained = _fm(env, "wake", "drain", "--json")
    assert drained.returncode == 0, drained.stderr
    result = json.loads(drained.stdout)
    if result["ack_through"] is None:
        return
    acked = _fm(env, "wake", "drain", "--ack-through", str(result["ack_through"]),
                "--recovery-generation", result["generation"])
    assert acked.returncode == 0, acked.stderr


def _handled_once(shim: Shim, env: dict[str, str], home: Home, deliver: dict[str, Any],
                  deadline: float = 90) -> None:
    """*deliver* arrived with a successor watching; once handled, no second wake for its rows
    follows: the next wake is the next event's."""
    assert _watcher(home) is not None, f"delivered while no watcher ran: {deliver}"
    shim.answer(deliver)
    _drain_ack(env)
    _append(env, "signal: builder done: NEXT-EVENT")
    following = shim.next("deliver", deadline=deadline)
    assert "NEXT-EVENT" in following["text"], (deliver, following)
    shim.answer(following)


def _supervising(shim: Shim, env: dict[str, str], home: Home) -> int:
    """Register a crew, greet the bridge and start a session; the first watcher's pid."""
    _crew(env)
    shim.hello()
    assert shim.start()["state"] == "started"
    pid = eventually("the first watcher", lambda: _watcher(home))
    assert isinstance(pid, int)
    return pid


# --- protocol ---------------------------------------------------------------------------------


def test_hello_and_bad_lines_are_answered_without_ending_the_bridge(
        bridge: tuple[Shim, dict[str, str]]) -> None:
    shim, _ = bridge
    welcome = shim.hello()
    assert welcome["protocol"] == 1 and welcome["delivery"] == "followUp"
    assert welcome["bridge_pid"] == shim.proc.pid
    shim.raw(b"not json\n")
    assert "not JSON" in shim.next("error")["message"]
    shim.raw(b"[1, 2]\n")
    assert "not a JSON object" in shim.next("error")["message"]
    shim.send("explode", id="x-1")
    error = shim.next("error")
    assert error["id"] == "x-1" and "unknown message type" in error["message"]
    shim.send("hello", protocol=99)
    assert "protocol 99 is not supported" in shim.next("error")["message"]
    shim.raw(b"\x1b]0;pwned\x07\n")
    assert "\x1b" not in json.dumps(shim.next("error"))
    # Hostile depth, size and encoding: each gets an error reply and the bridge runs on.
    shim.raw(b"[" * 100_000 + b"\n")
    assert "nests too deeply" in shim.next("error")["message"]
    shim.raw(b'{"type": "hello", "protocol": ' + b"[" * 500 + b"]" * 500 + b"}\n")
    assert "protocol list is not supported" in shim.next("error")["message"]
    shim.raw(b'{"type": "status", "id": "\xff\xfe"}\n')
    assert "not JSON" in shim.next("error")["message"]
    shim.raw(b"x" * (2 * 1024 * 1024) + b"\n")
    assert "longer than" in shim.next("error")["message"]
    status = shim.request("status")
    assert status["ok"] and status["engine"]["phase"] == "waiting"


def test_unknown_harness_is_refused_with_the_plugin_exit_code(fm_home: Home, plugins: Path) -> None:
    done = _fm(_env(fm_home, plugins), "bridge", "nosuchharness")
    assert done.returncode == 5 and "fm plugin add nosuchharness" in done.stderr
    assert _fm(_env(fm_home, plugins), "bridge").returncode == 2
    assert _fm(_env(fm_home, plugins), "bridge", "../evil").returncode == 2


# --- supervision --------------------------------------------------------------------------------


def test_session_start_waits_for_need_then_wakes_with_a_successor_already_watching(
        bridge: tuple[Shim, dict[str, str]], fm_home: Home) -> None:
    shim, env = bridge
    shim.hello()
    first = shim.start()
    assert first["state"] == "not-needed" and _watcher(fm_home) is None
    _crew(env)
    shim.send("idle", generation=shim.generation, session="s-1")
    assert "started" in shim.next("notice")["text"]
    watcher = eventually("the first watcher", lambda: _watcher(fm_home))
    _append(env, "signal: builder done: WAKE-ONE")
    deliver = shim.next("deliver")
    assert "WAKE-ONE" in deliver["text"] and deliver["text"].startswith("FIRSTMATE_OP:")
    assert deliver["generation"] == shim.generation and deliver["session"] == "s-1"
    # Successor first: when the wake is handed over, a new watcher already holds the lock.
    successor = _watcher(fm_home)
    assert successor is not None and successor != watcher
    shim.answer(deliver)
    # The lock record names this harness process.
    record = json.loads((fm_home.state / "bridge-bridgepi.json").read_text())
    assert record["phase"] == "active" and record["harness_pid"] == os.getpid()
    assert shim.request("arm", generation=shim.generation)["state"] == "unchanged"


def test_a_close_during_handoff_is_delivered_once_to_the_replacement(
        bridge: tuple[Shim, dict[str, str]], fm_home: Home) -> None:
    shim, env = bridge
    watcher = _supervising(shim, env, fm_home)
    assert shim.request("session_shutdown", generation=shim.generation,
                        reason="new")["state"] == "handoff"
    _append(env, "signal: builder done: DURING-HANDOFF")
    # The successor is started while the session is being replaced; the wake is held.
    eventually("the successor watcher", lambda: _watcher(fm_home) not in (None, watcher))
    assert [m for m in shim.pending() if m["type"] == "deliver"] == []
    old = shim.generation
    assert shim.start("new")["state"] == "unchanged"
    deliver = shim.next("deliver")
    assert "DURING-HANDOFF" in deliver["text"] and deliver["generation"] == old + 1
    _handled_once(shim, env, fm_home, deliver)
    # A late callback of the old generation changes nothing.
    stale = shim.request("arm", generation=old)
    assert stale["state"] == "stale"


def test_a_delivery_refused_by_a_replaced_session_goes_to_the_next_one(
        bridge: tuple[Shim, dict[str, str]], fm_home: Home) -> None:
    shim, env = bridge
    _supervising(shim, env, fm_home)
    _append(env, "signal: builder done: STALE-CTX")
    deliver = shim.next("deliver")
    # The harness replaced the session while the follow-up was in flight: "ctx is stale".
    shim.send("session_shutdown", id="sd", generation=shim.generation, reason="resume")
    shim.answer(deliver, ok=False, detail="This extension ctx is stale")
    shim.start("resume")
    again = shim.next("deliver")
    assert "STALE-CTX" in again["text"] and again["generation"] == shim.generation
    _handled_once(shim, env, fm_home, again)
    assert [m for m in shim.pending() if m["type"] == "deliver"] == []


def test_quit_stops_the_arms_and_refuses_late_rearms(
        bridge: tuple[Shim, dict[str, str]], fm_home: Home) -> None:
    shim, env = bridge
    _supervising(shim, env, fm_home)
    assert shim.request("session_shutdown", generation=shim.generation,
                        reason="quit")["state"] == "quit"
    eventually("the watcher to stop", lambda: _watcher(fm_home) is None)
    late = shim.request("arm", generation=shim.generation)
    assert late["state"] == "not-armed" and "shutting down" in late["text"]
    assert shim.proc.stdin is not None
    shim.proc.stdin.close()
    assert shim.proc.wait(30) == 0


def test_end_of_input_ends_the_bridge_and_its_watcher(
        bridge: tuple[Shim, dict[str, str]], fm_home: Home) -> None:
    shim, env = bridge
    _supervising(shim, env, fm_home)
    assert shim.proc.stdin is not None
    shim.proc.stdin.close()
    assert shim.proc.wait(30) == 0
    eventually("the watcher to stop", lambda: _watcher(fm_home) is None)


@pytest.mark.parametrize("bridge", ["bridgeomp"], indirect=True)
def test_omp_retires_its_arm_at_shutdown_and_replays_the_pending_close(
        bridge: tuple[Shim, dict[str, str]], fm_home: Home) -> None:
    shim, env = bridge
    _supervising(shim, env, fm_home)
    assert shim.request("session_shutdown", generation=shim.generation,
                        reason="unknown")["state"] == "handoff"
    eventually("the retired arm's watcher to stop", lambda: _watcher(fm_home) is None)
    _append(env, "signal: builder done: OMP-REPLAY")
    assert shim.start("unknown")["state"] in ("started", "unchanged")
    deliver = shim.next("deliver", deadline=90)
    assert "OMP-REPLAY" in deliver["text"] or "rearm-resurface" in deliver["text"]
    # Successor first, and exactly once: no second wake for the same rows follows.
    _handled_once(shim, env, fm_home, deliver)


# --- the idle queue tick (omp) --------------------------------------------------------------


def _status(pending: int, seq: int, at: float) -> Any:
    from firstmate.store import episodes
    from firstmate.store.queue import WakeRow
    from firstmate.store.queuestatus import QueueStatus

    oldest = WakeRow(seq, at, "signal", "builder", "signal: builder done: OWED") if pending else None
    return QueueStatus(depth=pending, last_seq=seq, oldest=oldest, pending_main=pending,
                       pending_branch=0, unusable=0, episode=episodes.MISSING, grant=None)


def test_idle_queue_names_the_oldest_owed_row_once_and_announces_read_failures_once() -> None:
    from types import SimpleNamespace

    from firstmate.host.bridge.idlequeue import READ_FAILED, IdleQueue

    tick = IdleQueue(SimpleNamespace(display_name="omp"), tick=10.0)  # type: ignore[arg-type]
    now = 1000.0
    assert tick.decide(_status(0, 0, now), now) is None
    assert tick.decide(_status(1, 5, now - 1), now) is None  # fresh: the watcher wakes for it
    text = tick.decide(_status(3, 5, now - 60), now)
    assert text is not None and text.startswith("FIRSTMATE_OP:")
    assert "signal: builder done: OWED (and 2 more queued rows)" in text
    assert tick.decide(_status(3, 5, now - 60), now) is None  # once per oldest row
    assert tick.decide(None, now) is None and tick.decide(None, now) is None
    failed = tick.decide(None, now)
    assert failed is not None and READ_FAILED in failed
    assert tick.decide(None, now) is None  # said once
    assert tick.decide(_status(1, 9, now - 60), now) is not None  # a read works again; new row


def test_the_idle_queue_names_the_mcp_tools_when_the_server_is_installed() -> None:
    from types import SimpleNamespace

    from firstmate.host.bridge.idlequeue import IdleQueue

    owner = SimpleNamespace(display_name="omp")
    plain = IdleQueue(owner, tick=10.0).decide(_status(1, 5, 0.0), 100.0)  # type: ignore[arg-type]
    tools = IdleQueue(owner, 10.0, True).decide(_status(1, 5, 0.0), 100.0)  # type: ignore[arg-type]
    assert plain is not None and "wake_drain" not in plain
    assert tools is not None and "call the firstmate MCP tool wake_drain" in tools


def test_a_session_started_after_quit_supervises_afresh(
        bridge: tuple[Shim, dict[str, str]], fm_home: Home) -> None:
    shim, env = bridge
    _supervising(shim, env, fm_home)
    shim.request("session_shutdown", generation=shim.generation, reason="quit")
    eventually("the watcher to stop", lambda: _watcher(fm_home) is None)
    assert shim.start("new")["state"] == "started"
    eventually("a watcher for the new session", lambda: _watcher(fm_home))
    _append(env, "signal: builder done: AFTER-QUIT")
    deliver = shim.next("deliver")
    assert "AFTER-QUIT" in deliver["text"]
    shim.answer(deliver)


def test_the_arm_tool_starts_then_answers_unchanged(
        bridge: tuple[Shim, dict[str, str]], fm_home: Home) -> None:
    shim, _ = bridge
    shim.hello()
    assert shim.start()["state"] == "not-needed"
    # An explicit repair arms even before anything is registered.
    assert shim.request("arm", generation=shim.generation)["state"] == "started"
    eventually("the watcher the tool armed", lambda: _watcher(fm_home))
    again = shim.request("arm", generation=shim.generation)
    assert again["state"] == "unchanged" and "already running" in again["text"]


def test_another_live_session_makes_this_one_read_only(
        bridge: tuple[Shim, dict[str, str]], fm_home: Home) -> None:
    from firstmate.continuity.session_lock import SessionRecord, record_path
    from firstmate.store.home import atomic_write
    from firstmate.testing import exec_identity

    shim, env = bridge
    _crew(env)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        ident = exec_identity(other)
        record = SessionRecord(pid=other.pid, identity=ident.token(), harness="unknown",
                               acquired_at=time.time())
        atomic_write(record_path(fm_home), record.to_json().encode())
        shim.hello()
        started = shim.start()
        assert started["state"] == "read-only" and str(other.pid) in started["text"]
        armed = shim.request("arm", generation=shim.generation)
        assert armed["state"] == "read-only" and _watcher(fm_home) is None
    finally:
        other.kill()
        other.wait()


# --- extension-load diagnostics (state/bridge-<harness>.json read back) -----------------------


def _status_lines(env: dict[str, str]) -> list[str]:
    done = _fm(env, "status")
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith("bridge: ")]


def test_a_replacement_that_never_loads_the_extension_is_reported_with_the_fix(
        bridge: tuple[Shim, dict[str, str]], fm_home: Home) -> None:
    shim, env = bridge
    _supervising(shim, env, fm_home)
    quick = {**env, "FM_BRIDGE_HANDOFF_GRACE": "0"}
    assert _status_lines(quick) == []  # active: nothing to report
    assert shim.request("session_shutdown", generation=shim.generation,
                        reason="new")["state"] == "handoff"
    # A handoff never counts as a loaded extension: once its grace is over, everyone says so.
    lines = _status_lines(quick)
    assert len(lines) == 1 and "has not loaded the Firstmate extension" in lines[0]
    assert "fm install bridgepi" in lines[0]
    assert _status_lines(env) == []  # (within the default grace: not yet)
    doctor = _fm(quick, "doctor", "--json")
    findings = [f for f in json.loads(doctor.stdout)["findings"] if f["check"] == "bridge"]
    assert findings and findings[0]["status"] == "warn" and "extension" in findings[0]["detail"]
    # What brings supervision back is the session loading the extension, not a reinstall.
    assert findings[0]["fix"].startswith("run /reload in bridgepi, or restart bridgepi")
    guard = _fm({**quick, "FM_PROJECT_DIR": str(fm_home.root)}, "guard")
    assert "has not loaded the Firstmate extension" in guard.stderr + guard.stdout
    # The replacement loads it: nothing left to report.
    shim.start("new")
    assert _status_lines(quick) == []


def test_a_bridge_gone_under_a_live_session_is_reported(
        bridge: tuple[Shim, dict[str, str]], fm_home: Home) -> None:
    shim, env = bridge
    _supervising(shim, env, fm_home)
    shim.proc.kill()
    shim.proc.wait(30)
    lines = _status_lines(env)
    assert len(lines) == 1 and "its fm bridge" in lines[0] and "is gone" in lines[0], lines
    data = json.loads(_fm(env, "status", "--json").stdout)
    assert data["bridges"] and "is gone" in data["bridges"][0]


class _Shim:
    """The shim end of an in-process bridge owner's channel: the messages it was sent."""

    def __init__(self) -> None:
        self.sent: queue.Queue[dict[str, Any]] = queue.Queue()

    def write(self, line: bytes) -> int:
        self.sent.put(json.loads(line))
        return len(line)

    def flush(self) -> None:
        return None


def _owner(home: Home) -> tuple[Any, _Shim]:
    from firstmate.host.bridge.channel import Channel
    from firstmate.host.bridge.owner import BridgeOwner
    from firstmate.plugin.harness import BridgeProfile

    shim = _Shim()
    owner = BridgeOwner("bridgeomp", BridgeProfile(harness="bridgeomp", delivery="prompt"),
                        home, {"FM_BRIDGE_DELIVER_TIMEOUT_MS": "5000"},
                        Channel(shim),  # type: ignore[arg-type]
                        None, phase="active", generation=1)  # type: ignore[arg-type]
    return owner, shim


def _queued(home: Home, text: str) -> None:
    from firstmate.store import queue as wakes
    from firstmate.store.database import Store

    db = Store(home)
    try:
        wakes.append(db, "signal", "builder", text, at=time.time() - 60)  # owed for a while
    finally:
        db.close()


def _drained(home: Home) -> None:
    """The model's drain and acknowledgement, in process."""
    from firstmate.store.database import Store
    from firstmate.store.drain import acknowledge, drain

    db = Store(home)
    try:
        shown = drain(db, "main", env={})
        assert shown.ack_through is not None and shown.generation is not None
        acknowledge(db, "main", shown.ack_through, shown.generation, env={})
    finally:
        db.close()


def _watcher_wake(owner: Any, text: str) -> Any:
    """Deliver a watcher's wake the way the engine does: through the bridge's delivery hook."""
    from firstmate.host.bridge.owner import ShimDelivery
    from firstmate.plugin.handoff import Close, Session, WakeDelivery

    wake = WakeDelivery("bridgeomp", text, (text,), None, Close((text,), 1))
    return ShimDelivery(owner).firstmate_deliver_wake(wake, Session(owner.home, "bridgeomp", {}))


def _in_thread(call: Any) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(call()), daemon=True)
    thread.start()
    return thread, box


def _answered_watcher_wake(home: Home, row: str, ok: bool) -> tuple[Any, _Shim, Any]:
    """Queue *row*, send a watcher's wake for it and answer it *ok*; the idle tick is asked
    while the wake is in flight (it names nothing: the wake may yet reach the model)."""
    from firstmate.host.bridge.idlequeue import IdleQueue

    owner, shim = _owner(home)
    tick = IdleQueue(owner, tick=0.0)
    _queued(home, row)
    watcher, receipt = _in_thread(lambda: _watcher_wake(owner, "the watcher's wake"))
    first = shim.sent.get(timeout=30)
    assert first["text"] == "the watcher's wake"
    assert tick.step() is None
    owner.channel.delivered(first["id"], ok, "" if ok else "the harness refused it")
    watcher.join(30)
    assert receipt[0].delivered is ok
    return owner, shim, tick


def _idle_wake(owner: Any, shim: _Shim, tick: Any) -> str:
    """One idle tick that delivers; the text it sent."""
    idle, said = _in_thread(tick.step)
    sent = shim.sent.get(timeout=30)
    owner.channel.delivered(sent["id"], True, "")
    idle.join(30)
    assert said[0] == sent["text"]
    return str(sent["text"])


def test_the_idle_tick_never_wakes_again_for_rows_a_delivered_watcher_wake_stood_for(
        fm_home: Home) -> None:
    # The wake reached the model: the row it stands for is not named again, neither before
    # the model drains it nor after.
    owner, shim, tick = _answered_watcher_wake(fm_home, "signal: builder done: COVERED", True)
    assert tick.step() is None
    _drained(fm_home)  # the model handles the wake
    assert tick.step() is None
    assert shim.sent.empty()
    # A row queued after the wake went out is owed: the tick names it, once.
    _queued(fm_home, "signal: builder done: LATER")
    text = _idle_wake(owner, shim, tick)
    assert "LATER" in text and "COVERED" not in text
    assert tick.step() is None


def test_the_idle_tick_still_names_rows_whose_watcher_wake_never_reached_the_model(
        fm_home: Home) -> None:
    owner, shim, tick = _answered_watcher_wake(fm_home, "signal: builder done: REFUSED", False)
    assert "REFUSED" in _idle_wake(owner, shim, tick)
