"""The fleet axis: wake latency and idle cost with 1, 50, 200 and 500 crews on a real tmux server.

Run with ``python bench/fleet.py`` (needs tmux and psutil). For each fleet size it starts a
private tmux server with one window per crew (a working agent's pane that does not change: busy, never stale), registers
the crews by pane id, and measures, with ``FM_SIGNAL_GRACE=0`` and the default ``FM_POLL``:

* **latency**: a chain of real ``fm arm`` successors; each sample appends one row a random
  0–200 ms after the arm's ``watcher: started`` line (0 included: right after the start, when
  the first full pass over the panes runs) and times until the arm prints the reason line;
* **idle**: one arm parked, measured from 18 s after its start (past ``FM_POLL``: every pane has
  had its one confirming read) for ``FM_BENCH_FLEET_IDLE`` seconds (default 20): CPU (% of one core)
  of the arm, the watcher and every short-lived tmux client they ran, plus the tmux server, and
  the watcher's RSS.

The baseline is the same measurement with one crew, in the same run: every line prints ratios
against it. Goals (issue: fleet scale): p99 ≤ 50 ms wherever the append lands, idle ≤ 1 % of a
core, RSS flat. The last line names the smallest fleet where a goal breaks, and is one JSON
object. Knobs: ``FM_BENCH_FLEET`` (sizes, default ``1,50,200,500``), ``FM_BENCH_FLEET_WAKES``
(samples per size, default 40), ``FM_BENCH_FLEET_IDLE``.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
CORE = HERE.parent / "core"
sys.path.insert(0, str(CORE))

from _common import emit  # noqa: E402  (the script's own folder is first on sys.path)
from latency import pct, read_line  # noqa: E402

SIZES = [int(n) for n in os.environ.get("FM_BENCH_FLEET", "1,50,200,500").split(",") if n]
WAKES = int(os.environ.get("FM_BENCH_FLEET_WAKES", "40"))
IDLE = float(os.environ.get("FM_BENCH_FLEET_IDLE", "20"))
#: Seconds from the idle arm's start to the measurement: FM_POLL (15) and a margin, so each
#: pane's one-off confirming read is behind it.
SETTLE = 18.0
GOAL_P99_MS, GOAL_CPU_PCT = 50.0, 1.0
#: What a working agent's pane shows, unchanging (the worst case: it is confirmed busy, never
#: stale, and the watcher must not keep reading it).
BUSY_PANE = "printf 'Working (3m 12s - esc to interrupt)\\n'; exec sleep 100000"


def tmux(socket: str, *args: str) -> str:
    done = subprocess.run(["tmux", "-L", socket, "-f", "/dev/null", *args], capture_output=True,
                          text=True, timeout=60, check=True)
    return done.stdout


def fleet(socket: str, size: int) -> list[str]:
    """A tmux server with *size* windows, each a working agent's unchanging pane; their ids."""
    tmux(socket, "new-session", "-d", "-s", "fleet", "-x", "120", "-y", "30", "sh", "-c",
         BUSY_PANE)
    for _ in range(size - 1):
        tmux(socket, "new-window", "-d", "-t", "fleet", "sh", "-c",
             BUSY_PANE)
    return tmux(socket, "list-panes", "-a", "-F", "#{pane_id}").split()


def cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system + t.children_user + t.children_system)


def measure(size: int, tmp: Path) -> dict[str, float]:
    from firstmate.store import crew, queue
    from firstmate.store.database import open_store
    from firstmate.store.home import Home

    socket = f"fm-bench-{os.getpid()}-{size}"
    home = Home(tmp / f"home-{size}").ensure()
    try:
        for i, pane in enumerate(fleet(socket, size)):
            crew.add(home, f"c{i}", pane)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
        env.update({"PYTHONPATH": str(CORE), "FM_HOME": str(home.root), "FM_SIGNAL_GRACE": "0",
                    "FM_TMUX_SOCKET": socket, "FIRSTMATE_PLUGINS": "none"})
        db = open_store(home)
        samples: list[float] = []
        previous: int | None = None
        try:
            for i in range(WAKES):
                run_env = env if previous is None else {**env,
                                                        "FM_WATCH_PREDECESSOR_ARM_PID": str(previous)}
                arm = subprocess.Popen([sys.executable, "-m", "firstmate", "arm"],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=run_env)
                status = read_line(arm, 120)
                if not status.startswith(("watcher: started", "watcher: attached")):
                    raise SystemExit(f"unexpected arm status: {status}")
                time.sleep(0 if i % 4 == 0 else random.uniform(0, 0.2))
                t0 = time.perf_counter()
                queue.append(db, "check", f"bench-{i}", f"check: bench {i}")
                line = read_line(arm, 120)
                samples.append(time.perf_counter() - t0)
                if line != f"check: bench {i}":
                    raise SystemExit(f"unexpected reason line: {line!r}")
                arm.wait(timeout=60)
                previous = arm.pid
            arm = subprocess.Popen([sys.executable, "-m", "firstmate", "arm"],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   env={**env, "FM_WATCH_PREDECESSOR_ARM_PID": str(previous)})
            read_line(arm, 120)
            # Steady state: past FM_POLL, every pane has had its one confirming read (busy).
            time.sleep(SETTLE)
            server = psutil.Process(int(tmux(socket, "display-message", "-p", "#{pid}")))
            arm_p = psutil.Process(arm.pid)
            watcher = next(iter(arm_p.children()), None)
            procs = [p for p in (arm_p, watcher, server) if p is not None]
            before = [cpu(p) for p in procs]
            start = time.monotonic()
            time.sleep(IDLE)
            used = sum(cpu(p) - b for p, b in zip(procs, before, strict=True))
            elapsed = time.monotonic() - start
            rss = watcher.memory_info().rss / 2**20 if watcher is not None else 0.0
            queue.append(db, "check", "bench-end", "check: bench end")
            arm.wait(timeout=60)
        finally:
            db.close()
        ms = [s * 1000 for s in samples]
        return {"crews": size, "p50_ms": round(statistics.median(ms), 2),
                "p99_ms": round(pct(ms, 99), 2), "max_ms": round(max(ms), 2),
                "idle_cpu_pct": round(100 * used / elapsed, 3), "watcher_rss_mb": round(rss, 1)}
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, check=False)


def main() -> int:
    if shutil.which("tmux") is None:
        raise SystemExit("bench/fleet.py needs a tmux binary")
    tmp = Path(tempfile.mkdtemp(prefix="fm-fleet-"))
    rows: list[dict[str, float]] = []
    try:
        for size in SIZES:
            rows.append(measure(size, tmp))
            row, base = rows[-1], rows[0]
            print(f"{int(row['crews']):>4} crews: append->reason p50 {row['p50_ms']:.1f} ms, "
                  f"p99 {row['p99_ms']:.1f} ms, max {row['max_ms']:.1f} ms "
                  f"({row['p99_ms'] / max(base['p99_ms'], 0.001):.1f}x the 1-crew p99); idle "
                  f"{row['idle_cpu_pct']:.2f} % of a core, watcher RSS {row['watcher_rss_mb']} MB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    broken = [r for r in rows if r["p99_ms"] > GOAL_P99_MS or r["idle_cpu_pct"] > GOAL_CPU_PCT]
    breaks_at = int(broken[0]["crews"]) if broken else None
    print(f"goals: p99 <= {GOAL_P99_MS:g} ms, idle <= {GOAL_CPU_PCT:g} % of a core: "
          + (f"first broken at {breaks_at} crews" if broken else
             f"held up to {int(rows[-1]['crews'])} crews"))
    emit("fleet", {"bench": "fleet", "sizes": rows, "breaks_at": breaks_at,
                   "goal_p99_ms": GOAL_P99_MS, "goal_idle_cpu_pct": GOAL_CPU_PCT})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
