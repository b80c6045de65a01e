"""The fleet the benchmarks measure: N crews on a real tmux server, a real arm chain, a real idle.

Shared by ``bench/latency.py`` and ``bench/idle.py`` (stdlib and psutil only).

``Fleet(size, tmp)`` is what a user with *size* crews runs: a private tmux server (its own
``-L`` socket, no config file) with one window per crew, each a working agent's pane that never
changes (busy and never stale: the case where a naive watcher keeps reading every pane), every
pane registered as a crew in a fresh home. Every process it starts runs this checkout's core
(``PYTHONPATH``), the default ``FM_POLL``, ``FM_SIGNAL_GRACE=0`` and no harness plugin. On it:

* :meth:`Fleet.wake` starts the next real ``python -m firstmate arm`` of a chain (each one the
  handling successor of the one before, ``FM_WATCH_PREDECESSOR_ARM_PID``, as continuity runs
  it), waits for its ``watcher: started`` line, then after *delay* seconds (0 included: right
  after the start, while the watcher runs its first pass over the panes) appends one row and
  times until the arm prints the reason line;
* :meth:`Fleet.first_minute` parks the first arm on the fresh home and measures the CPU of
  its first minute, a new fleet's first look at its panes included;
* :meth:`Fleet.idle` parks one arm of the chain, waits past ``FM_POLL`` and until every pane
  has had its one confirming read (each crew's ``pane-state`` records it read busy), then
  measures over a window the CPU time (% of one core) of the arm, the watcher, every
  short-lived tmux client the watcher ran (its reaped children) and the tmux server, the
  watcher's and the arm's RSS, and a ``sleep`` process over the same window as the baseline.

The tmux server is killed and the database closed when the ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import psutil

HERE = Path(__file__).resolve().parent
CORE = HERE.parent / "core"
if str(CORE) not in sys.path:
    sys.path.insert(0, str(CORE))

#: ``FM_BENCH_FLEET``: the fleet sizes, smallest first; the first is every ratio's reference.
SIZES = sorted({int(n) for n in os.environ.get("FM_BENCH_FLEET", "1,50,200,500").split(",")
                if n.strip()})
#: What a working agent's pane shows, unchanging.
BUSY_PANE = "printf 'Working (3m 12s - esc to interrupt)\\n'; exec sleep 100000"
#: Where an append lands after ``watcher: started``: one sample in four at 0 s, the rest uniform.
APPEND_WITHIN = 0.2
#: Seconds for a line from an arm or a tmux call; a slow machine with 500 panes stays inside.
DEADLINE = 120.0


def read_line(proc: subprocess.Popen[bytes], deadline: float = 30.0) -> str:
    """The next line of *proc*'s stdout, read unbuffered (what came with it past its end is
    kept for the next call). The reader blocks at once in one ``select``: a process whose wake
    puts it on this CPU waits for this reader to block, so any work done before that would
    count against the line."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf: bytes = getattr(proc, "_bench_rest", b"")
    end = time.monotonic() + deadline
    while b"\n" not in buf:
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            raise SystemExit(f"no line from pid {proc.pid} within {deadline}s (got {buf!r})")
        chunk = os.read(fd, 65536)
        if not chunk:
            raise SystemExit(f"pid {proc.pid} closed stdout (got {buf!r})")
        buf += chunk
    line, _, rest = buf.partition(b"\n")
    proc._bench_rest = rest  # type: ignore[attr-defined]
    return line.decode()


def pct(values: list[float], q: float) -> float:
    """The *q*-th percentile (nearest rank) of *values*."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def append_delay(i: int) -> float:
    """Seconds from ``watcher: started`` to the *i*-th append: 0 for every fourth, else random."""
    return 0.0 if i % 4 == 0 else random.uniform(0, APPEND_WITHIN)


def own_seconds(proc: psutil.Process) -> float:
    """User + system CPU seconds of *proc* itself."""
    t = proc.cpu_times()
    return float(t.user + t.system)


def reaped_seconds(proc: psutil.Process) -> float:
    """User + system CPU seconds of *proc*'s children that exited and were waited for."""
    t = proc.cpu_times()
    return float(t.children_user + t.children_system)


def need_tmux(script: str) -> None:
    if shutil.which("tmux") is None:
        raise SystemExit(f"{script} needs a tmux binary")


class Fleet:
    """A tmux server with *size* busy crews registered in a fresh home under *tmp*."""

    def __init__(self, size: int, tmp: Path) -> None:
        self.size = size
        self.socket = f"fm-bench-{os.getpid()}-{size}"
        self.root = tmp / f"home-{size}"
        self.previous: int | None = None  # the last arm of the chain that exited
        self.arm: subprocess.Popen[bytes] | None = None
        self.count = 0

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=DEADLINE, check=True)
        return done.stdout

    def __enter__(self) -> Fleet:
        from firstmate.store import crew
        from firstmate.store.database import open_store
        from firstmate.store.home import Home

        try:
            self.tmux("new-session", "-d", "-s", "fleet", "-x", "120", "-y", "30", "sh", "-c",
                      BUSY_PANE)
            for _ in range(self.size - 1):
                self.tmux("new-window", "-d", "-t", "fleet", "sh", "-c", BUSY_PANE)
            panes = self.tmux("list-panes", "-a", "-F", "#{pane_id}").split()
            if len(panes) != self.size:
                raise SystemExit(f"tmux lists {len(panes)} panes, not {self.size}")
            self.server = psutil.Process(int(self.tmux("display-message", "-p", "#{pid}")))
            self.home = Home(self.root).ensure()
            for i, pane in enumerate(panes):
                crew.add(self.home, f"c{i}", pane)
            self.env = {k: v for k, v in os.environ.items()
                        if not k.startswith(("FM_", "FIRSTMATE_"))}
            self.env.update({"PYTHONPATH": str(CORE), "FM_HOME": str(self.home.root),
                             "FM_SIGNAL_GRACE": "0", "FM_TMUX_SOCKET": self.socket,
                             "FIRSTMATE_PLUGINS": "none"})
            self.db = open_store(self.home)
        except BaseException:
            self._kill_server()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if self.arm is not None and self.arm.poll() is None:
                try:
                    procs = [*psutil.Process(self.arm.pid).children(recursive=True)]
                except psutil.NoSuchProcess:
                    procs = []
                self.arm.kill()
                for p in procs:
                    p.kill()
                self.arm.wait()
            db = getattr(self, "db", None)
            if db is not None:
                db.close()
        finally:
            self._kill_server()

    def _kill_server(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True,
                       check=False)
        # kill-server returns before the server has closed its panes: wait, so that a large
        # fleet's teardown does not run into the next measurement.
        server = getattr(self, "server", None)
        if server is not None:
            with contextlib.suppress(psutil.Error):
                server.wait(timeout=DEADLINE)

    # --- the arm chain ---------------------------------------------------------------------

    def start_arm(self) -> subprocess.Popen[bytes]:
        """The next arm of the chain, once it has printed its ``watcher: started`` line."""
        env = self.env if self.previous is None else {
            **self.env, "FM_WATCH_PREDECESSOR_ARM_PID": str(self.previous)}
        self.arm = subprocess.Popen([sys.executable, "-m", "firstmate", "arm"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
        status = read_line(self.arm, DEADLINE)
        if not status.startswith("watcher: started"):
            raise SystemExit(f"unexpected arm status: {status!r}")
        return self.arm

    def deliver(self, arm: subprocess.Popen[bytes]) -> tuple[float, float]:
        """Append one row now; (append → reason line, append returned → reason line) seconds."""
        from firstmate.store import queue

        self.count += 1
        reason = f"check: bench {self.count}"
        t0 = time.perf_counter()
        queue.append(self.db, "check", f"bench-{self.count}", reason)
        t1 = time.perf_counter()
        line = read_line(arm, DEADLINE)
        t2 = time.perf_counter()
        if line != reason:
            raise SystemExit(f"unexpected reason line: {line!r}")
        if arm.wait(timeout=DEADLINE) != 0:
            raise SystemExit(f"the arm exited {arm.returncode}")
        self.previous = arm.pid
        return t2 - t0, t2 - t1

    def wake(self, delay: float) -> tuple[float, float]:
        """One sample: the next arm, *delay* seconds after its start line, one append."""
        arm = self.start_arm()
        time.sleep(delay)
        return self.deliver(arm)

    # --- idle ----------------------------------------------------------------------------------

    def confirmed(self) -> int:
        """How many crews' panes the watcher has read and found busy (their pane-state says so)."""
        from firstmate.store import crew
        from firstmate.watch.sources.stale import PaneState

        count = 0
        for i in range(self.size):
            try:
                text = crew.path(self.home, f"c{i}", crew.PANE_STATE).read_text()
            except OSError:
                continue
            state = PaneState.decode(text)
            count += state is not None and state.busy_at != "-"
        return count

    def settle(self, least: float) -> float:
        """Wait *least* seconds, then until every pane had its confirming read; the seconds."""
        start = time.monotonic()
        time.sleep(least)
        # The confirming pass reads every pane of a fleet that went quiet together in one poll:
        # seconds at 500 crews on a loaded machine. It is not idle cost.
        while self.confirmed() < self.size:
            if time.monotonic() - start > least + DEADLINE:
                raise SystemExit(f"only {self.confirmed()} of {self.size} panes were read busy")
            time.sleep(0.5)
        time.sleep(1.0)  # the last state file is written just before the pass ends
        return time.monotonic() - start

    def parts(self, arm: subprocess.Popen[bytes]) -> dict[str, Callable[[], float]]:
        """Readers of the CPU seconds used so far by the arm, its watcher, every tmux client the
        watcher ran (each a child it waits for) and the tmux server."""
        arm_p = psutil.Process(arm.pid)
        children = arm_p.children()
        if len(children) != 1:
            raise SystemExit(f"the arm has {len(children)} children, not one watcher")
        watcher = children[0]
        return {"arm": lambda: own_seconds(arm_p) + reaped_seconds(arm_p),
                "watcher": lambda: own_seconds(watcher),
                "tmux_clients": lambda: reaped_seconds(watcher),
                "tmux_server": lambda: own_seconds(self.server)}

    def first_minute(self, seconds: float) -> dict[str, float]:
        """A new fleet's first look: the first arm on this fresh home, parked, measured from its
        ``watcher: started`` line over *seconds* — the first poll lists the panes, and once
        ``FM_POLL`` has passed every pane, the whole fleet quiet together, has its one
        confirming read. The CPU seconds in all (arm, watcher, its tmux clients, tmux server),
        by part, and when the last pane was confirmed (seconds after the start line)."""
        arm = self.start_arm()
        parts = self.parts(arm)
        before = {name: read() for name, read in parts.items()}
        start = time.monotonic()
        confirmed_at: float | None = None
        while (left := seconds - (time.monotonic() - start)) > 0:
            time.sleep(min(0.5, left))
            if confirmed_at is None and self.confirmed() == self.size:
                confirmed_at = time.monotonic() - start
        after = {name: read() for name, read in parts.items()}
        if arm.poll() is not None:
            raise SystemExit("the arm exited during its first minute")
        self.deliver(arm)
        used = {name: after[name] - before[name] for name in parts}
        return {"crews": self.size, "seconds": round(time.monotonic() - start, 1),
                "cpu_s": round(sum(used.values()), 3),
                **{f"{name}_cpu_s": round(v, 3) for name, v in used.items()},
                "all_confirmed_after_s": (None if confirmed_at is None
                                          else round(confirmed_at, 1))}

    def idle(self, seconds: float, settle: float) -> dict[str, float]:
        """The parked arm's steady cost over *seconds*, from *settle* seconds after its start
        and once every pane had its confirming read."""
        arm = self.start_arm()
        sleeper = subprocess.Popen(["sleep", str(int(settle + seconds + DEADLINE) + 60)])
        try:
            settled = self.settle(settle)
            arm_p = psutil.Process(arm.pid)
            watcher, base = arm_p.children()[0], psutil.Process(sleeper.pid)
            parts = {**self.parts(arm), "sleep": lambda: own_seconds(base)}
            before = {name: read() for name, read in parts.items()}
            start = time.monotonic()
            time.sleep(seconds)
            after = {name: read() for name, read in parts.items()}
            wall = time.monotonic() - start
            rss = {name: p.memory_info().rss / 2**20
                   for name, p in (("watcher", watcher), ("arm", arm_p), ("sleep", base))}
            if arm.poll() is not None:
                raise SystemExit("the arm exited during the idle window")
        finally:
            sleeper.kill()
            sleeper.wait()
        self.deliver(arm)  # end the cycle the way a user's does: a wake
        used = {name: 100 * (after[name] - before[name]) / wall for name in parts}
        row = {"crews": self.size, "seconds": round(wall, 1), "settled_s": round(settled, 1),
               "cpu_pct": round(sum(v for k, v in used.items() if k != "sleep"), 3),
               **{f"{name}_cpu_pct": round(v, 3) for name, v in used.items() if name != "sleep"},
               "baseline_sleep_cpu_pct": round(used["sleep"], 3),
               "watcher_rss_mb": round(rss["watcher"], 1), "arm_rss_mb": round(rss["arm"], 1),
               "baseline_sleep_rss_mb": round(rss["sleep"], 1),
               # CPU time is counted in clock ticks: below this a figure reads as 0.
               "cpu_resolution_pct": round(100 / os.sysconf("SC_CLK_TCK") / wall, 3)}
        return row
