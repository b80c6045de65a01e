"""Idle cost with 1, 50, 200 and 500 crews: the CPU and memory of a parked arm, nothing happening,
and a new fleet's first minute.

Run with ``python bench/idle.py`` (needs tmux and psutil). For each fleet size it starts a
private tmux server with one window per crew, each a working agent's unchanging pane (busy, never
stale: the case where a naive watcher keeps reading every pane), registered as crews by pane id.

**The first minute.** The first arm on the fresh home is parked and measured from its ``watcher:
started`` line over ``FM_BENCH_FIRST_SECONDS`` (default 60): the first poll lists the panes, and
once ``FM_POLL`` has passed every pane (the whole fleet went quiet together) has its one
confirming read, found busy. Reported: the CPU seconds in all (arm, watcher, its tmux clients,
tmux server), by part, and when the last pane was confirmed. Goal: ≤ 2 s of CPU at 500 crews.

**The steady state.** Then it parks one real ``python -m firstmate arm`` (the handling successor
of the arm that took the first minute's wake, as continuity runs it) with the default
``FM_POLL`` and no harness plugin
(``bench/_fleet.py``). The window opens ``FM_POLL`` + 3 s after its ``watcher: started`` line,
and not before every pane has had its one confirming read (each crew's ``pane-state`` records it
read busy: a fleet that went quiet together is read in one pass, seconds long at 500 crews on a
loaded machine, and that one-off pass is not idle). Over ``FM_BENCH_IDLE_SECONDS`` (default 30:
two polls) it measures the CPU time, as % of one core, of everything the machine runs for the
user's supervision: the arm, the watcher, every short-lived tmux client the watcher ran (its
reaped children) and the tmux server; and the watcher's RSS. The baseline is a ``sleep`` process
measured over the same window.

Goals: idle ≤ 1 % of one core at every size; RSS flat, i.e. the watcher's RSS at each size
≤ 1.1 x its RSS with the first size (1 crew by default), which each line prints as a ratio. The
closing line names the smallest size where a goal breaks (or says they held); the last line is
one JSON object. Knobs: ``FM_BENCH_FLEET`` (sizes, default ``1,50,200,500``),
``FM_BENCH_IDLE_SECONDS``, ``FM_BENCH_FIRST_SECONDS``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from _common import emit  # the script's own folder is first on sys.path
from _fleet import SIZES, Fleet, need_tmux

SECONDS = float(os.environ.get("FM_BENCH_IDLE_SECONDS", "30"))
FIRST_SECONDS = float(os.environ.get("FM_BENCH_FIRST_SECONDS", "60"))
GOAL_CPU_PCT, GOAL_RSS_RATIO = 1.0, 1.1
#: A new fleet's first look at its panes, in CPU seconds in all (the first minute, the first
#: poll's listing and every pane's confirming read included).
GOAL_FIRST_CPU_S = 2.0


def main() -> int:
    from firstmate.watch.watcher import DEFAULT_POLL

    need_tmux("bench/idle.py")
    # From the arm's start to the window at least: past FM_POLL, when the confirming reads fall.
    settle = DEFAULT_POLL + 3.0
    tmp = Path(tempfile.mkdtemp(prefix="fm-idle-"))
    rows: list[dict[str, float]] = []
    print(f"idle: arm + watcher + its tmux clients + tmux server over {SECONDS:g} s, from "
          f">= {settle:g} s after the start, every pane confirmed busy (goal <= "
          f"{GOAL_CPU_PCT:g} % of one core, watcher RSS <= {GOAL_RSS_RATIO:g}x the "
          f"{SIZES[0]}-crew RSS); baseline: a sleep process, same window", flush=True)
    try:
        for size in SIZES:
            with Fleet(size, tmp) as fleet:
                # The first arm on the fresh home: its first minute, the first look included.
                first = fleet.first_minute(FIRST_SECONDS)
                r = fleet.idle(SECONDS, settle)  # a successor parked, as a user's is
            r["first_minute"] = first
            r["first_minute_meets_goal"] = first["cpu_s"] <= GOAL_FIRST_CPU_S
            reference = rows[0]["watcher_rss_mb"] if rows else r["watcher_rss_mb"]
            r["rss_ratio"] = round(r["watcher_rss_mb"] / reference, 2)
            r["meets_goal"] = r["cpu_pct"] <= GOAL_CPU_PCT and r["rss_ratio"] <= GOAL_RSS_RATIO
            rows.append(r)
            print(f"{size:>4} crews, first minute on a fresh home: {first['cpu_s']:.2f} s of CPU "
                  f"in all (watcher {first['watcher_cpu_s']:.2f}, its tmux clients "
                  f"{first['tmux_clients_cpu_s']:.2f}, tmux server "
                  f"{first['tmux_server_cpu_s']:.2f}, arm {first['arm_cpu_s']:.2f}); every pane "
                  f"read busy {first['all_confirmed_after_s']} s after the start", flush=True)
            print(f"{size:>4} crews (window from {r['settled_s']:.0f} s): {r['cpu_pct']:.2f} % "
                  f"of a core (arm {r['arm_cpu_pct']:.2f}, "
                  f"watcher {r['watcher_cpu_pct']:.2f}, its tmux clients "
                  f"{r['tmux_clients_cpu_pct']:.2f}, tmux server {r['tmux_server_cpu_pct']:.2f}; "
                  f"sleep {r['baseline_sleep_cpu_pct']:.2f}; resolution "
                  f"{r['cpu_resolution_pct']}); watcher RSS {r['watcher_rss_mb']:.1f} MB "
                  f"({r['rss_ratio']:.2f}x), arm {r['arm_rss_mb']:.1f} MB, sleep "
                  f"{r['baseline_sleep_rss_mb']:.1f} MB", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    slow = [r for r in rows if not r["first_minute_meets_goal"]]
    print(f"goal: a new fleet's first minute <= {GOAL_FIRST_CPU_S:g} s of CPU in all: "
          + (f"first broken at {int(slow[0]['crews'])} crews" if slow else
             f"held up to {int(rows[-1]['crews'])} crews"))
    broken = [r for r in rows if not r["meets_goal"]]
    breaks_at = int(broken[0]["crews"]) if broken else None
    print(f"goals: idle <= {GOAL_CPU_PCT:g} % of a core, RSS flat (<= {GOAL_RSS_RATIO:g}x): "
          + (f"first broken at {breaks_at} crews" if broken else
             f"held up to {int(rows[-1]['crews'])} crews"))
    emit("idle", {"bench": "watcher-idle", "sizes": rows, "breaks_at": breaks_at,
                  "seconds": SECONDS, "settle_s": settle, "goal_cpu_pct": GOAL_CPU_PCT,
                  "first_seconds": FIRST_SECONDS, "goal_first_cpu_s": GOAL_FIRST_CPU_S,
                  "goal_rss_ratio": GOAL_RSS_RATIO})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
