"""``fm demo``: a supervised fleet in a throw-away home, end to end, in under a minute.

Three scripted crews report status lines from real tmux panes (or plain processes when tmux is
absent), one of them goes quiet; a registered check reports once; a simulated primary, woken by
the continuity engine (``firstmate.continuity``) through a small in-core demo harness, drains,
"handles" and acknowledges every wake the way a model would. The engine re-arms before every
delivery, exactly as a harness plugin's re-arm owner does. Midway the demo SIGKILLs
the live watcher, appends a wake while nothing watches, and shows the downtime announced once and
recovered. Everything is driven through the same ``fm`` commands a user or a harness runs.

The demo exits non-zero when an invariant broke: a wake acknowledged twice or never, an arm that
exited 0 without a reason line, a downtime announced more than once, or anything left running.
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
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

import attrs

from firstmate import hookimpl
from firstmate.continuity import Continuity
from firstmate.handoff import DeliveryReceipt, Session, WakeDelivery

ACK_RE = re.compile(r"WAKE_ACK_REQUIRED: .*--ack-through (\d+) --recovery-generation (\S+)")


def fm(*args: str) -> list[str]:
    return [sys.executable, "-m", "firstmate", *args]


@attrs.frozen
class Wake:
    reason: str
    latency_ms: float | None
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
    """Prints the live view: one line per event, plain text (works on a TTY and in a log)."""

    out: IO[str]
    t0: float = attrs.Factory(time.monotonic)
    _lock: threading.Lock = attrs.Factory(threading.Lock)

    def say(self, text: str) -> None:
        # The engine reports from its own threads: one whole line at a time.
        with self._lock:
            self.out.write(f"[{time.monotonic() - self.t0:6.2f}s] {text}\n")
            self.out.flush()


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
        lines.append("clear; echo 'idle'; sleep 600" if quiet_after
                     else "while :; do date +%s.%N; echo '(esc to interrupt)'; sleep 0.3; done")
        return "\n".join(lines)

    def start_crews(self) -> None:
        plans = {
            "alpha": ([(1.0, "working: parser refactor"), (1.5, "done: parser refactor merged")], False),
            "bravo": ([(2.5, "needs-decision: key=db postgres or sqlite for the cache?")], True),
            "charlie": ([(4.0, "working: flaky test hunt"), (2.0, "blocked: CI runner out of disk"),
                         (6.0, "done: runner cleaned, CI green")], False),
        }
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
        from firstmate.core_plugin import CorePlugin
        from firstmate.home import Home
        from firstmate.plugins import PluginHost, new_manager

        # The simulated primary owns the session lock, as a harness session would.
        subprocess.run(fm("lock", "acquire"), env={**self.env, "FM_SESSION_HOLDER_PID": str(os.getpid())},
                       capture_output=True, text=True, timeout=60, check=True)
        pm = new_manager()
        pm.register(CorePlugin(), name="firstmate-core")
        pm.register(harness, name="demo")
        session = Session(Home(self.home), "demo", self.env)
        return Continuity.for_session(session, PluginHost(pm), display_name="Demo",
                                      observer=self.view.say)

    def handle(self, reason: str, reason_at: float) -> None:
        drained = self.run("wake", "drain")
        rows = tuple(line for line in drained.stdout.splitlines() if re.match(r"^\d+\t", line))
        match = ACK_RE.search(drained.stderr)
        latency = None
        stamp = self.event_stamp(reason)
        if stamp is not None and reason_at:
            latency = max(0.0, (reason_at - stamp) * 1000)
        self.view.say(f"wake: {reason}" + (f"   (event → reason {latency:.0f} ms)" if latency is not None else ""))
        for row in rows:
            self.view.say(f"  drained row {row.split(chr(9))[0]}: {row.split(chr(9))[-1]}")
        generation = None
        if match:
            through, generation = int(match.group(1)), match.group(2)
            self.run("wake", "drain", "--ack-through", str(through), "--recovery-generation", generation)
            seqs = [int(row.split("\t")[0]) for row in rows]
            self.acked_rows.extend(seqs)
            self.view.say(f"  acknowledged through {through} (generation {generation})")
        if reason.startswith("check: rearm-resurface"):
            self.resurfaced += 1
        self.wakes.append(Wake(reason, latency, rows, generation))
        self.show_status()

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
        st = self.status()
        watcher = st.get("watcher")
        pid = watcher.get("pid") if isinstance(watcher, dict) else None
        if not isinstance(pid, int) or not isinstance(watcher, dict) or not watcher.get("healthy"):
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
            while time.monotonic() < deadline and not (self.resurfaced and len(self.wakes) >= 6):
                if not killed and len(self.wakes) >= 3:
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


def run_demo(out: IO[str], env: Mapping[str, str] | None = None, *, keep: bool = False) -> int:
    base_env = dict(os.environ if env is None else env)
    home = Path(tempfile.mkdtemp(prefix="firstmate-demo-"))
    socket_name = f"firstmate-demo-{os.getpid()}"
    tmux = shutil.which("tmux")
    demo_env = {
        **{k: v for k, v in base_env.items() if not k.startswith("FM_")},
        "FM_HOME": str(home),
        "FM_SIGNAL_GRACE": "0",
        "FM_POLL": "5",
        "FM_HEARTBEAT": "3600",
        "FM_CHECK_INTERVAL": "3",
        "FM_TMUX_SOCKET": socket_name,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                    base_env.get("PYTHONPATH", "")])),
    }
    view = View(out)
    demo = Demo(home, demo_env, view, tmux, socket_name)
    view.say(f"home {home} ({'tmux' if tmux else 'no tmux: crews run as plain processes'})")
    try:
        flag = home / "release.flag"
        demo.run("check", "add", "release", "--", "sh", "-c",
                 f"test -f {shlex.quote(str(flag))} && rm -f {shlex.quote(str(flag))} && echo 'release 1.3 tagged' || true")
        view.say("check 'release' registered")
        demo.start_crews()
        flag.write_text("tagged\n")
        demo.main_loop(time.monotonic() + 45)
        demo.check_invariants()
    except Exception as exc:  # the demo reports, it does not crash
        demo.problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(Exception):
            demo.run("arm", "--stop", check=False)
        if tmux:
            subprocess.run([tmux, "-L", socket_name, "kill-server"], capture_output=True, check=False,
                           timeout=30)
        for proc in demo.crews:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        if not keep:
            shutil.rmtree(home, ignore_errors=True)
    latencies = sorted(w.latency_ms for w in demo.wakes if w.latency_ms is not None)
    out.write("\nsummary\n")
    out.write(f"  wakes handled: {len(demo.wakes)}; rows acknowledged: {len(demo.acked_rows)}; "
              f"downtime announcements: {demo.resurfaced}\n")
    if latencies:
        p50 = latencies[len(latencies) // 2]
        out.write(f"  event → reason latency: p50 {p50:.0f} ms, max {latencies[-1]:.0f} ms "
                  f"over {len(latencies)} status wakes (the original polls every 15 s)\n")
    if demo.problems:
        for problem in demo.problems:
            out.write(f"  INVARIANT BROKEN: {problem}\n")
        return 1
    out.write("  all invariants held\n")
    return 0
