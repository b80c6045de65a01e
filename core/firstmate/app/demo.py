"""``fm demo``: a supervised fleet in a throw-away home, end to end, in under a minute.

Three scripted crews report status lines from real tmux panes (or plain processes when tmux is
absent), one of them goes quiet; a registered check reports once; a simulated primary, woken by
the continuity engine (``firstmate.continuity.engine``) through a small in-core demo harness, drains,
"handles" and acknowledges every wake the way a model would. The engine re-arms before every
delivery, exactly as a harness plugin's re-arm owner does. Midway the demo SIGKILLs
the live watcher, appends a wake while nothing watches, and shows the downtime announced once and
recovered. Everything is driven through the same ``fm`` commands a user or a harness runs.

The scenario ends once every scripted status that concerns the captain reached the primary;
its last turn then drains anything still queued. The demo exits non-zero when an invariant
broke: a wake acknowledged twice or never, a scripted status that never reached the primary, an
arm that exited 0 without a reason line, a downtime announced more than once, or anything left running
(after the teardown no process may name the demo home or its tmux socket in its command line or
environment, and the demo's tmux server must be gone).

On a terminal (and ``TERM`` is not ``dumb``) the events feed a live panel redrawn in place
(:mod:`firstmate.app.demo_panel`); otherwise each event is printed as one plain line.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

import attrs

from firstmate import hookimpl
from firstmate.app.demo_panel import LivePanel, Snapshot, WakeRow, sample, wants_live_view
from firstmate.base.names import fm_module_argv
from firstmate.continuity.engine import Continuity
from firstmate.plugin.handoff import DeliveryReceipt, Session, WakeDelivery

SAMPLE_EVERY_S = 1.0
#: The longest the scenario may run before the demo reports what it could not show.
SCENARIO_BOUND_S = 240.0
#: How long a crew lingers after its script (the demo itself ends well before).
CREW_LIFETIME_S = 180
ACK_RE = re.compile(r"WAKE_ACK_REQUIRED: .*--ack-through (\d+) --recovery-generation (\S+)")
#: A drained row's line (firstmate.fast.drainview.line): ``  #<seq> …``.
ROW_RE = re.compile(r"  #(\d+) ")


def _seq(row: str) -> int:
    found = ROW_RE.match(row)
    return int(found.group(1)) if found else 0


def fm(*args: str) -> list[str]:
    return fm_module_argv(*args)


@attrs.frozen
class Wake:
    reason: str
    #: Crew status stamp → the reason line read by the primary (status wakes only).
    latency_ms: float | None
    #: The queue row's append → the reason line read by the primary.
    append_ms: float | None
    rows: tuple[str, ...]
    generation: str | None


@attrs.define(eq=False)
class DemoHarness:
    """The demo's harness plugin: its wake channel is a queue the simulated primary reads."""

    delivered: queue.Queue[WakeDelivery] = attrs.Factory(queue.Queue)
    texts: list[str] = attrs.Factory(list)

    @hookimpl
    def firstmate_deliver_wake(self, wake: WakeDelivery, session: Session) -> DeliveryReceipt | None:
        if session.harness != "demo":
            return None
        self.texts.append(wake.text)
        self.delivered.put(wake)
        return DeliveryReceipt(True, "queued for the simulated primary")


@attrs.define(eq=False)
class View:
    """The event feed: plain lines, or (``live``) the recent events shown in the live panel."""

    out: IO[str]
    live: bool = False
    t0: float = attrs.Factory(time.monotonic)
    events: deque[str] = attrs.Factory(lambda: deque(maxlen=50))
    _lock: threading.Lock = attrs.Factory(threading.Lock)

    def say(self, text: str) -> None:
        # The engine reports from its own threads: one whole line at a time.
        line = f"[{time.monotonic() - self.t0:6.2f}s] {text}"
        with self._lock:
            if self.live:
                self.events.append(line)
                return
            self.out.write(line + "\n")
            self.out.flush()

    def recent(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self.events)


@attrs.define(eq=False)
class Demo:
    home: Path
    env: dict[str, str]
    view: View
    tmux: str | None
    socket: str
    crews: list[subprocess.Popen[bytes]] = attrs.Factory(list)
    wakes: list[Wake] = attrs.Factory(list)
    problems: list[str] = attrs.Factory(list)
    resurfaced: int = 0
    acked_rows: list[int] = attrs.Factory(list)
    appended: int = 0
    appended_at: dict[str, float] = attrs.Factory(dict)
    #: The crews' scripted status lines that concern the captain: each must reach the primary.
    scripted: list[str] = attrs.Factory(list)
    #: What reached the primary: every wake's reasons and every drain's output.
    presented: list[str] = attrs.Factory(list)
    sampled: tuple[float, Snapshot] | None = None

    # --- plumbing -----------------------------------------------------------------------------

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(fm(*args), env=self.env, capture_output=True, text=True,
                              timeout=60, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"fm {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def status(self) -> dict[str, object]:
        data: dict[str, object] = json.loads(self.run("status", "--json").stdout)
        return data

    def show_status(self) -> None:
        st = self.status()
        watcher = st.get("watcher") or {}
        queue = st.get("queue") or {}
        assert isinstance(watcher, dict) and isinstance(queue, dict)
        age = watcher.get("beacon_age")
        self.view.say(
            f"  watcher pid={watcher.get('pid')} healthy={watcher.get('healthy')} "
            f"beacon={'-' if age is None else f'{float(age):.1f}s'} queue={queue.get('depth')} "
            f"episode={st.get('episode')}"
        )

    # --- the fleet ----------------------------------------------------------------------------

    def crew_script(self, name: str, steps: Sequence[tuple[float, str]], quiet_after: bool) -> str:
        """A shell script for one crew: print work to its pane, report status lines on time."""
        fm_cmd = " ".join(shlex.quote(part) for part in fm())
        lines = ["set -u"]
        for delay, status in steps:
            # Agent TUIs show an interrupt hint while they work; the backend reads it as busy.
            lines.append(f"echo '{name} working… (esc to interrupt)'")
            lines.append(f"sleep {delay}")
            lines.append(f"echo '{name}: {status}'")
            lines.append(f"{fm_cmd} crew status {name} {shlex.quote(status)}")
        # Bounded, so a demo killed before its teardown (SIGKILL) cannot leave a fleet behind
        # for long: the last window closing ends the tmux server too.
        lines.append(f"clear; echo 'idle'; sleep {CREW_LIFETIME_S}" if quiet_after
                     else f"end=$(($(date +%s) + {CREW_LIFETIME_S})); while [ $(date +%s) -lt $end ]; "
                          "do date +%s.%N; echo '(esc to interrupt)'; sleep 0.3; done")
        return "\n".join(lines)

    def start_crews(self) -> None:
        plans = {
            "alpha": ([(1.0, "working: parser refactor"), (1.5, "done: parser refactor merged")], False),
            "bravo": ([(2.5, "needs-decision: key=db postgres or sqlite for the cache?")], True),
            "charlie": ([(4.0, "working: flaky test hunt"), (2.0, "blocked: CI runner out of disk"),
                         (6.0, "done: runner cleaned, CI green")], False),
        }
        from firstmate.fast.captain import relevance

        relevant = relevance(self.env.get("FM_CAPTAIN_RE"))
        self.scripted = [status for steps, _ in plans.values() for _, status in steps
                         if relevant(status)]
        for name, (steps, quiet) in plans.items():
            script = self.home / f"{name}.sh"
            script.write_text(self.crew_script(name, steps, quiet))
            if self.tmux:
                target = f"fleet:{name}"
                cmd = [self.tmux, "-L", self.socket]
                if name == "alpha":
                    cmd += ["new-session", "-d", "-s", "fleet", "-n", name, "-x", "120", "-y", "20"]
                else:
                    cmd += ["new-window", "-d", "-t", "fleet", "-n", name]
                env_args = [f"{k}={v}" for k, v in self.env.items() if k.startswith(("FM_", "PYTHON"))]
                subprocess.run([*cmd, "env", *env_args, "sh", str(script)], env=self.env,
                               check=True, timeout=30)
                self.run("crew", "add", name, "--pane", target)
            else:
                self.run("crew", "add", name, "--pane", f"none:{name}")
                self.crews.append(subprocess.Popen(["sh", str(script)], env=self.env,
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                   start_new_session=True))
            self.view.say(f"crew {name} registered ({'tmux pane ' + name if self.tmux else 'process'})")

    # --- the simulated primary ----------------------------------------------------------------

    def engine(self, harness: DemoHarness) -> Continuity:
        """The re-arm owner: the core's continuity engine with the demo harness plugin."""
        from firstmate.app.defaults import CorePlugin
        from firstmate.plugin.manager import PluginHost, new_manager
        from firstmate.store.home import Home

        # The simulated primary owns the session lock, as a harness session would.
        subprocess.run(fm("lock", "acquire"), env={**self.env, "FM_SESSION_HOLDER_PID": str(os.getpid())},
                       capture_output=True, text=True, timeout=60, check=True)
        pm = new_manager()
        pm.register(CorePlugin(), name="firstmate-core")
        pm.register(harness, name="demo")
        session = Session(Home(self.home), "demo", self.env)
        return Continuity.for_session(session, PluginHost(pm), display_name="Demo",
                                      observer=self.view.say)

    def drain(self, *, handling: bool = True) -> tuple[tuple[str, ...], re.Match[str] | None]:
        """``fm wake drain``: the rows it presented and its acknowledgement line, if one is owed.
        A drain that handles a wake counts as what reached the primary."""
        drained = self.run("wake", "drain")
        if handling:
            self.presented.append(drained.stdout)
        rows = tuple(line for line in drained.stdout.splitlines() if ROW_RE.match(line))
        return rows, ACK_RE.search(drained.stderr)

    def acknowledge(self, rows: Sequence[str], match: re.Match[str]) -> tuple[int, str]:
        """Run the acknowledgement a drain printed; (through, generation)."""
        through, generation = int(match.group(1)), match.group(2)
        self.run("wake", "drain", "--ack-through", str(through), "--recovery-generation", generation)
        self.acked_rows.extend(_seq(row) for row in rows)
        return through, generation

    def final_drain(self) -> None:
        """The primary's last turn, once the watcher is stopped: a row queued after the story
        was told (a crew that looked quiet under load, say) had no wake handled for it yet,
        and a real primary would drain it at its next turn; nothing may stay queued. (It does
        not count as delivery: :meth:`unreported` still names a scripted status only it shows.)"""
        rows, match = self.drain(handling=False)
        if match is None:
            return
        through, _ = self.acknowledge(rows, match)
        if rows:
            self.view.say(f"final drain: {len(rows)} row(s) reported as the scenario ended, "
                          f"acknowledged through {through}")

    def unreported(self) -> list[str]:
        """The scripted status lines that have not reached the primary yet (as a reason, a
        drained row or the drain's crew-status presentation)."""
        return [line for line in self.scripted if not any(line in text for text in self.presented)]

    def told(self) -> bool:
        """The story is told: six wakes handled, the downtime resurfaced, every scripted status
        reached the primary (a crew reporting as the scenario ended is not cut off)."""
        return bool(self.resurfaced) and len(self.wakes) >= 6 and not self.unreported()

    def handle(self, reason: str, reason_at: float) -> None:
        self.presented.append(reason)
        rows, match = self.drain()
        latency = None
        stamp = self.event_stamp(reason)
        if stamp is not None and reason_at:
            latency = max(0.0, (reason_at - stamp) * 1000)
        # A reason's row is often drained (and acknowledged) with an earlier wake: remember when
        # every drained row was appended, before the acknowledgement deletes it.
        self.appended_at.update(self.append_stamps(rows))
        appended = self.appended_at.get(reason)
        append_ms = None if appended is None else max(0.0, (reason_at - appended) * 1000)
        figures = [f"event → reason {latency:.0f} ms"] if latency is not None else []
        figures += [f"append → reason {append_ms:.0f} ms"] if append_ms is not None else []
        self.view.say(f"wake: {reason}" + (f"   ({', '.join(figures)})" if figures else ""))
        for row in rows:
            self.view.say(f"  drained row {_seq(row)}: {row.split(' ', 3)[-1]}")
        generation = None
        if match:
            through, generation = self.acknowledge(rows, match)
            self.view.say(f"  acknowledged through {through} (generation {generation})")
        if reason.startswith("check: rearm-resurface"):
            self.resurfaced += 1
        self.wakes.append(Wake(reason, latency, append_ms, rows, generation))
        if not self.view.live:  # the panel shows this continuously
            self.show_status()

    def append_stamps(self, rows: Sequence[str]) -> dict[str, float]:
        """When each drained row was appended, by its payload (the reason line it carries)."""
        seqs = [_seq(row) for row in rows]
        if not seqs:
            return {}
        import sqlite3

        from firstmate.store.home import Home

        stamps: dict[str, float] = {}
        with contextlib.suppress(sqlite3.Error, TypeError, ValueError):
            conn = sqlite3.connect(f"file:{Home(self.home).db}?mode=ro", uri=True, timeout=5)
            try:
                for payload, at in conn.execute(
                        f"SELECT payload, at FROM wakes WHERE seq IN ({','.join('?' * len(seqs))})",
                        tuple(seqs)):
                    stamps[str(payload)] = float(at)
            finally:
                conn.close()
        return stamps

    def snapshot(self) -> Snapshot:
        """The panel's view. The home (tmux panes, lock, beacon, queue) is read at most once a
        second so the panel stays cheap next to the fleet; the rest is fresh at every redraw."""
        now = time.monotonic()
        rows = tuple(WakeRow(w.reason, w.latency_ms, w.append_ms) for w in self.wakes[-5:])
        if self.sampled is None or now - self.sampled[0] >= SAMPLE_EVERY_S:
            self.sampled = (now, sample(self.home, self.env, 0.0, (), ()))
        taken, snap = self.sampled
        age = None if snap.beacon_age is None else snap.beacon_age + (now - taken)
        return attrs.evolve(snap, elapsed=now - self.view.t0, beacon_age=age, wakes=rows,
                            events=self.view.recent())

    def event_stamp(self, reason: str) -> float | None:
        """When the crew stamped the status line this reason carries (for the latency figure)."""
        match = re.match(r"signal: ([\w.-]+)\.status: (.*)$", reason)
        if not match:
            return None
        log = self.home / "state" / "crew" / f"{match.group(1)}.status"
        with contextlib.suppress(OSError):
            for line in reversed(log.read_text().splitlines()):
                at, _, text = line.partition("\t")
                if text.strip() == match.group(2).strip():
                    with contextlib.suppress(ValueError):
                        return float(at)
        return None

    def kill_watcher(self) -> int | None:
        """SIGKILL the watcher when it is quiet: healthy, with nothing queued, so the kill
        cannot race a close. ``None`` (try again later) when it is not."""
        st = self.status()
        watcher = st.get("watcher")
        queued = st.get("queue") or {}
        pid = watcher.get("pid") if isinstance(watcher, dict) else None
        if not isinstance(pid, int) or not isinstance(watcher, dict) or not watcher.get("healthy"):
            return None
        if isinstance(queued, dict) and queued.get("depth") not in (0, None):
            return None
        os.kill(pid, signal.SIGKILL)
        self.view.say(f"chaos: SIGKILL watcher pid={pid}")
        return pid

    def watcher_gone(self, pid: int, deadline: float) -> bool:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                return False
            time.sleep(0.05)
        return False

    def main_loop(self, deadline: float) -> None:
        harness = DemoHarness()
        engine = self.engine(harness)
        refused = engine.start()
        if refused is not None:
            raise RuntimeError(refused)
        killed = False
        try:
            while time.monotonic() < deadline and not self.told():
                if not killed and len(self.wakes) >= 3 and harness.delivered.empty():
                    pid = self.kill_watcher()
                    if pid is not None and self.watcher_gone(pid, time.monotonic() + 15):
                        # Nothing watches now (the engine's arm waits for a successor, then
                        # fails and is restored): the append must resurface exactly once.
                        killed = True
                        self.appended += 1
                        self.run("wake", "append", "check", f"deploy-{self.appended}",
                                 "check: deploy: release 1.4 finished while unwatched")
                        self.view.say("producer: appended 'check: deploy' while no watcher ran")
                try:
                    wake = harness.delivered.get(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
                except queue.Empty:
                    continue
                self.take(wake)
                if wake.restoration_failure:
                    # The owner stands down after a failed restoration (e.g. the SIGKILL landed
                    # mid-handoff) until it is repaired, as a harness does at the primary's next
                    # turn: without this nothing would watch for the rest of the demo.
                    self.view.say("primary: restoration failed; repairing (engine.rearm())")
                    engine.rearm()
                if killed and any(r.startswith("check: deploy") for r in wake.reasons):
                    # The kill raced a close and a successor took the append: try again.
                    killed = False
        finally:
            engine.close()
            self.run("arm", "--stop", check=False)
            while not harness.delivered.empty():
                self.take(harness.delivered.get_nowait())

    def take(self, wake: WakeDelivery) -> None:
        if wake.restoration_failure:
            self.view.say(f"delivered with: {wake.restoration_failure}")
        if not wake.reasons:
            self.problems.append(f"a wake without a reason was delivered: {wake.text!r}")
            return
        if not wake.text.startswith("FIRSTMATE_OP:") or "fm wake drain" not in wake.text:
            self.problems.append(f"a wake was delivered without its next step: {wake.text!r}")
        at = wake.close.at if wake.close is not None else time.time()
        self.handle(wake.reasons[0], at)

    def check_invariants(self) -> None:
        st = self.status()
        queue = st.get("queue") or {}
        depth = queue.get("depth") if isinstance(queue, dict) else None
        if depth not in (0, None):
            self.problems.append(f"{depth} wake row(s) were never acknowledged")
        if len(self.acked_rows) != len(set(self.acked_rows)):
            self.problems.append("a wake row was acknowledged twice")
        if self.resurfaced != 1:
            self.problems.append(f"downtime was announced {self.resurfaced} times (expected exactly once)")
        self.problems.extend(f"a crew's status never reached the primary: {line}"
                             for line in self.unreported())


def leftovers(home: Path, socket: str) -> list[tuple[int, str]]:
    """Processes still running that name the demo home or its tmux socket (not this one)."""
    import psutil

    me = psutil.Process()
    spare = {me.pid, *(parent.pid for parent in me.parents())}
    found: list[tuple[int, str]] = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        if proc.pid in spare:
            continue
        try:
            cmdline = " ".join(proc.info["cmdline"] or ())
            hit = str(home) in cmdline or socket in cmdline
            if not hit:
                environ = proc.environ()
                hit = (environ.get("FM_HOME") == str(home)
                       or environ.get("FM_TMUX_SOCKET") == socket)
            if hit and proc.status() != psutil.STATUS_ZOMBIE:
                found.append((proc.pid, cmdline or str(proc.info["name"])))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def tmux_server_alive(tmux: str, socket: str) -> bool:
    probe = subprocess.run([tmux, "-L", socket, "list-sessions"], capture_output=True,
                           check=False, timeout=30)
    return probe.returncode == 0


def check_nothing_left(demo: Demo, *, within: float = 15.0) -> None:
    """The teardown left nothing running; whatever survived is reported, then killed."""
    deadline = time.monotonic() + within
    while True:
        alive = leftovers(demo.home, demo.socket)
        server = demo.tmux is not None and tmux_server_alive(demo.tmux, demo.socket)
        if (not alive and not server) or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # processes on their way out: poll until the deadline
    if server:
        demo.problems.append(f"the demo's tmux server (socket {demo.socket}) is still running")
    for pid, what in alive:
        demo.problems.append(f"left running after the demo: pid {pid}: {what[:120]}")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def run_demo(out: IO[str], env: Mapping[str, str] | None = None, *, keep: bool = False,
             live: bool | None = None) -> int:
    base_env = dict(os.environ if env is None else env)
    home = Path(tempfile.mkdtemp(prefix="firstmate-demo-"))
    keys = Path(tempfile.mkdtemp(prefix="firstmate-demo-keys-"))  # the throw-away home's secret
    socket_name = f"firstmate-demo-{os.getpid()}"
    tmux = shutil.which("tmux")
    demo_env = {
        **{k: v for k, v in base_env.items() if not k.startswith("FM_")},
        "FM_HOME": str(home),
        "FIRSTMATE_KEYS_DIR": str(keys / "keys"),
        "FM_SIGNAL_GRACE": "0",
        "FM_POLL": "5",
        "FM_HEARTBEAT": "3600",
        "FM_CHECK_INTERVAL": "3",
        "FM_TMUX_SOCKET": socket_name,
        # After the scripted SIGKILL the engine's arm waits this long for a successor before
        # it fails and the engine restores the cycle (a start keeps its full budget).
        "FM_ARM_SUCCESSOR_CONFIRM_TIMEOUT": "3",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                    base_env.get("PYTHONPATH", "")])),
    }
    live = wants_live_view(out, base_env) if live is None else live
    view = View(out, live=live)
    demo = Demo(home, demo_env, view, tmux, socket_name)
    view.say(f"home {home} ({'tmux' if tmux else 'no tmux: crews run as plain processes'})")
    panel = LivePanel(out, demo.snapshot, lambda: shutil.get_terminal_size().columns) if live else None
    if panel is not None:
        panel.start()
    try:
        flag = home / "release.flag"
        demo.run("check", "add", "release", "--", "sh", "-c",
                 f"test -f {shlex.quote(str(flag))} && rm -f {shlex.quote(str(flag))} && echo 'release 1.3 tagged' || true")
        view.say("check 'release' registered")
        demo.start_crews()
        flag.write_text("tagged\n")
        # The scenario ends as soon as its story is told (under a minute on an idle machine);
        # the bound only stops a demo that cannot finish, so a slow machine is given time.
        demo.main_loop(time.monotonic() + SCENARIO_BOUND_S)
        demo.final_drain()
        demo.check_invariants()
    except Exception as exc:  # the demo reports, it does not crash
        demo.problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        if panel is not None:
            panel.stop()
            demo.problems.extend(f"the live panel failed: {err}" for err in panel.errors)
        with contextlib.suppress(Exception):
            demo.run("arm", "--stop", check=False)
        if tmux:
            subprocess.run([tmux, "-L", socket_name, "kill-server"], capture_output=True, check=False,
                           timeout=30)
        for proc in demo.crews:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        try:
            check_nothing_left(demo)
        except Exception as exc:  # (reported as a broken invariant)
            demo.problems.append(f"could not check for leftover processes: {exc}")
        if not keep:
            shutil.rmtree(home, ignore_errors=True)
            shutil.rmtree(keys, ignore_errors=True)
    out.write(summary(demo))
    out.flush()
    return 1 if demo.problems else 0


def _p50(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def summary(demo: Demo) -> str:
    lines = ["", "summary",
             f"  wakes handled: {len(demo.wakes)}; rows acknowledged: {len(demo.acked_rows)}; "
             f"downtime announcements: {demo.resurfaced}"]
    event = [w.latency_ms for w in demo.wakes if w.latency_ms is not None]
    if event:
        lines.append(f"  event → reason latency (crew status stamp → reason read by the primary): "
                     f"p50 {_p50(event):.0f} ms, max {max(event):.0f} ms over {len(event)} status "
                     f"wakes (the original polls every 15 s)")
    appended = [w.append_ms for w in demo.wakes if w.append_ms is not None]
    if appended:
        lines.append(f"  append → reason latency (queue row appended → reason read by the primary): "
                     f"p50 {_p50(appended):.0f} ms, max {max(appended):.0f} ms over "
                     f"{len(appended)} wakes")
    lines.append("  leftover processes checked: none may name the demo home or its tmux socket")
    lines += [f"  INVARIANT BROKEN: {problem}" for problem in demo.problems]
    if not demo.problems:
        lines.append("  all invariants held")
    return "\n".join(lines) + "\n"
