"""Wake latency with 1, 50, 200 and 500 crews: a durable append → the reason line its arm prints.

Run with ``python bench/latency.py`` (needs tmux; stdlib and psutil). For each fleet size it
starts a private tmux server with one window per crew, each a working agent's unchanging pane
(busy, never stale), registered as crews by pane id, and runs a chain of real
``python -m firstmate arm`` processes, each the handling successor of the one before, with
``FM_SIGNAL_GRACE=0``, the default ``FM_POLL`` and no harness plugin (``bench/_fleet.py``). Each
sample starts the next arm, reads its ``watcher: started`` line and, with no settle, appends one
row through the Python API at a random point 0–200 ms after that line (one sample in four at
0 ms: while the new watcher runs its first pass over the panes), then times until the arm
prints the reason line. Also reported: the part from the append's return (the row durable,
fsynced) to the printed line, where the slowest sample's append landed, the worst sample appended
at 0 ms, and the first arm of the size (a fresh home, appended at 0 ms; not among the samples).
A chain that runs longer than ``FM_POLL`` (the default does) crosses the poll that gives every
pane its one confirming read, all at once since the whole fleet went quiet together: the sample
in flight then waits for the pane read under way (the pass gives way when the doorbell rings),
and the maximum shows it.

Baseline, per size, in the same run against the same database and tmux server: a poller that
re-reads the queue's newest sequence on a fixed interval (the original's mechanism, at
``FM_BENCH_BASELINE_INTERVAL`` instead of its 15 s so the run stays short), timed the same way
with the append at a random phase; each size prints the baseline's p50 and p99 as ratios of ours.

Goals: p50 ≤ 10 ms, p99 ≤ 50 ms wherever the append lands. The closing line names the smallest
size whose p99 exceeds 50 ms (or says the goal held); the last line is one JSON object. Knobs:
``FM_BENCH_FLEET`` (sizes, default ``1,50,200,500``), ``FM_BENCH_WAKES`` (samples per size,
default 100), ``FM_BENCH_BASELINE_INTERVAL`` (seconds, default 0.2).
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

from _common import emit  # the script's own folder is first on sys.path
from _fleet import SIZES, Fleet, append_delay, need_tmux, pct, read_line

WAKES = int(os.environ.get("FM_BENCH_WAKES", "100"))
INTERVAL = float(os.environ.get("FM_BENCH_BASELINE_INTERVAL", "0.2"))
GOAL_P50_MS, GOAL_P99_MS = 10.0, 50.0
ORIGINAL_POLL_S = 15.0

# The baseline: poll the queue's newest sequence every INTERVAL seconds; print each change.
POLLER = """
import sqlite3, sys, time
db, interval = sys.argv[1], float(sys.argv[2])
conn = sqlite3.connect(db, isolation_level=None)
last = None
print("ready", flush=True)
while True:
    seq = conn.execute("SELECT coalesce(max(seq), 0) FROM wakes").fetchone()[0]
    if last is not None and seq != last:
        print(seq, flush=True)
    last = seq
    time.sleep(interval)
"""


def baseline(fleet: Fleet) -> list[float]:
    """Append → the fixed-interval poller prints the change, WAKES times, in seconds."""
    from firstmate.store import queue

    poller = subprocess.Popen([sys.executable, "-c", POLLER, str(fleet.home.db), str(INTERVAL)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    samples: list[float] = []
    try:
        read_line(poller)
        for i in range(WAKES):
            time.sleep(random.uniform(0, INTERVAL))  # a random phase against the poll
            t0 = time.perf_counter()
            queue.append(fleet.db, "check", f"base-{i}", f"check: baseline {i}")
            read_line(poller)
            samples.append(time.perf_counter() - t0)
    finally:
        poller.kill()
        poller.wait()
    return samples


def measure(size: int, tmp: Path) -> dict[str, float]:
    with Fleet(size, tmp) as fleet:
        first, _ = fleet.wake(0.0)
        ours: list[float] = []
        durable: list[float] = []
        delays: list[float] = []
        for i in range(WAKES):
            delays.append(append_delay(i) * 1000)
            total, after = fleet.wake(delays[-1] / 1000)
            ours.append(total * 1000)
            durable.append(after * 1000)
        base = [v * 1000 for v in baseline(fleet)]
    p50, p99 = statistics.median(ours), pct(ours, 99)
    b50, b99 = statistics.median(base), pct(base, 99)
    worst = ours.index(max(ours))
    at_start = [t for t, d in zip(ours, delays, strict=True) if d == 0]
    return {"crews": size, "wakes": len(ours), "p50_ms": round(p50, 2), "p99_ms": round(p99, 2),
            "max_ms": round(max(ours), 2), "at_start_max_ms": round(max(at_start), 2),
            # Where the slowest sample's append landed, and its part after the row was durable.
            "max_appended_at_ms": round(delays[worst], 1),
            "max_durable_to_printed_ms": round(durable[worst], 2),
            "durable_to_printed_p50_ms": round(statistics.median(durable), 2),
            "durable_to_printed_p99_ms": round(pct(durable, 99), 2),
            "first_arm_ms": round(first * 1000, 2),
            "baseline_p50_ms": round(b50, 1), "baseline_p99_ms": round(b99, 1),
            "ratio_p50": round(b50 / p50, 1), "ratio_p99": round(b99 / p99, 1),
            "meets_goal": p50 <= GOAL_P50_MS and p99 <= GOAL_P99_MS}


def main() -> int:
    need_tmux("bench/latency.py")
    tmp = Path(tempfile.mkdtemp(prefix="fm-latency-"))
    rows: list[dict[str, float]] = []
    print(f"append -> arm prints reason, {WAKES} wakes per size, appended 0-200 ms after "
          f"`watcher: started` (goal p50 <= {GOAL_P50_MS:g} ms, p99 <= {GOAL_P99_MS:g} ms); "
          f"baseline: a fixed {INTERVAL:g} s poller, same run", flush=True)
    try:
        for size in SIZES:
            r = measure(size, tmp)
            rows.append(r)
            print(f"{size:>4} crews: p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, max "
                  f"{r['max_ms']:.1f} ms (appended {r['max_appended_at_ms']:.0f} ms after the "
                  f"start); appended at 0 ms: max {r['at_start_max_ms']:.1f} ms; first arm on a "
                  f"fresh home {r['first_arm_ms']:.1f} ms\n"
                  f"            append returned -> printed p50 "
                  f"{r['durable_to_printed_p50_ms']:.1f} ms, p99 "
                  f"{r['durable_to_printed_p99_ms']:.1f} ms; baseline p50 "
                  f"{r['baseline_p50_ms']:.0f} ms, p99 {r['baseline_p99_ms']:.0f} ms -> "
                  f"{r['ratio_p50']}x faster at p50, {r['ratio_p99']}x at p99", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    broken = [r for r in rows if r["p99_ms"] > GOAL_P99_MS]
    breaks_at = int(broken[0]["crews"]) if broken else None
    print(f"goal p99 <= {GOAL_P99_MS:g} ms: "
          + (f"first broken at {breaks_at} crews" if broken else
             f"held up to {int(rows[-1]['crews'])} crews")
          + f" (the original's {ORIGINAL_POLL_S:g} s poll: ~{ORIGINAL_POLL_S / 2:g} s expected "
            "p50)")
    emit("latency", {"bench": "wake-latency", "sizes": rows, "breaks_at": breaks_at,
                     "wakes_per_size": WAKES, "baseline_interval_s": INTERVAL,
                     "original_15s_expected_p50_ms": ORIGINAL_POLL_S / 2 * 1000,
                     "goal_p50_ms": GOAL_P50_MS, "goal_p99_ms": GOAL_P99_MS})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
