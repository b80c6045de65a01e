"""Idle cost of a watcher: CPU (% of one core) and RSS while nothing happens.

Run with ``python bench/idle.py``. Starts a real watcher (``fm watch``) on a fresh home with the
default ``FM_POLL`` (15 s), waits until it is healthy, then measures its CPU time and resident
memory over ``FM_BENCH_IDLE_SECONDS`` (default 60) with psutil. A ``sleep`` process measured over
the same window is the baseline. Goals: < 0.5 % of one core, RSS < 40 MB. The last line is one
JSON object.
"""

from __future__ import annotations

import os
import shutil
import signal
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

SECONDS = float(os.environ.get("FM_BENCH_IDLE_SECONDS", "60"))
GOAL_CPU_PCT, GOAL_RSS_MB = 0.5, 40.0


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def main() -> int:
    from firstmate.store.health import watcher_health
    from firstmate.store.home import Home

    tmp = Path(tempfile.mkdtemp(prefix="fm-idle-"))
    home = Home(tmp / "home").ensure()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update({"PYTHONPATH": str(CORE), "FM_HOME": str(home.root),
                "FM_TMUX": str(tmp / "no-tmux"), "FIRSTMATE_PLUGINS": "none"})
    watcher = subprocess.Popen([sys.executable, "-m", "firstmate", "watch"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=env)
    sleeper = subprocess.Popen(["sleep", str(int(SECONDS) + 60)])
    try:
        deadline = time.monotonic() + 30
        while not watcher_health(home, env).healthy:
            if time.monotonic() > deadline or watcher.poll() is not None:
                raise SystemExit("the watcher did not become healthy")
            time.sleep(0.05)
        time.sleep(1.0)  # let the first poll's one-off work (plugin load, migrations) finish
        procs = {"watcher": psutil.Process(watcher.pid), "sleep": psutil.Process(sleeper.pid)}
        before = {name: cpu_seconds(p) for name, p in procs.items()}
        start = time.monotonic()
        time.sleep(SECONDS)
        wall = time.monotonic() - start
        after = {name: cpu_seconds(p) for name, p in procs.items()}
        rss = {name: p.memory_info().rss / (1024 * 1024) for name, p in procs.items()}
        if watcher.poll() is not None:
            raise SystemExit("the watcher exited during the idle window")
    finally:
        watcher.send_signal(signal.SIGTERM)
        try:
            watcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            watcher.kill()
        sleeper.kill()
        sleeper.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    cpu = {name: (after[name] - before[name]) / wall * 100 for name in procs}
    result: dict[str, object] = {
        "bench": "watcher-idle",
        "seconds": round(wall, 1),
        "cpu_pct": round(cpu["watcher"], 4),
        "rss_mb": round(rss["watcher"], 1),
        "baseline_sleep_cpu_pct": round(cpu["sleep"], 4),
        "baseline_sleep_rss_mb": round(rss["sleep"], 1),
        "rss_ratio": round(rss["watcher"] / max(rss["sleep"], 0.1), 1),
        # CPU time is counted in clock ticks: below this the figure reads as 0.
        "cpu_resolution_pct": round(100 / os.sysconf("SC_CLK_TCK") / wall, 4),
        "goal_cpu_pct": GOAL_CPU_PCT,
        "goal_rss_mb": GOAL_RSS_MB,
    }
    result["meets_goal"] = cpu["watcher"] < GOAL_CPU_PCT and rss["watcher"] < GOAL_RSS_MB
    print(f"watcher idle {wall:.0f}s: CPU {result['cpu_pct']:.3f}% of one core, RSS "
          f"{result['rss_mb']:.1f} MB (goal < {GOAL_CPU_PCT:g}%, < {GOAL_RSS_MB:g} MB; CPU "
          f"resolution {result['cpu_resolution_pct']}%)")
    print(f"baseline sleep process: CPU {result['baseline_sleep_cpu_pct']:.3f}%, RSS "
          f"{result['baseline_sleep_rss_mb']:.1f} MB (watcher RSS is {result['rss_ratio']}x)")
    emit("idle", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
