"""Cold-start benchmark of the hot paths: every gate path of ``fm hook claude stop``, ``fm wake
append`` and ``fm crew status``.

Run with ``python bench/coldstart.py [--runs N] [--check]``. Each command runs N times,
alternating with the baseline ``python -c pass`` of the same interpreter and environment, so
machine load hits both alike. Reported per command: the median wall time, the baseline's, their
ratio and the median of the per-pair ratios. Goals: every gate path of a hook (a never-used home,
a crew's own session, nothing to supervise, away mode, another harness's payload) <= 1.6;
``fm wake append`` and ``fm crew status`` <= 2.0. A supervised home's hook, which loads the
plugin and runs it, is reported as a reference. The last line is one JSON object; ``--check``
exits 1 when a goal is missed.

The commands run the way a harness runs them: the ``fm`` console script next to this interpreter
when it is installed, else ``python -m firstmate``. The hook's no-work path is a genuine Claude
Stop payload in a project whose home has never been set up (nothing is supervised, so the
plugin's quick gate answers before pluggy loads). Standard library only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import emit  # the script's own folder is first on sys.path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GOAL_RATIO = 1.6
#: The producers' commands: a durable append (fsync included) and a crew's status line.
PRODUCER_GOAL = 2.0

CURSOR_STOP = json.dumps({
    "conversation_id": "bench", "generation_id": "g", "hook_event_name": "stop",
    "cursor_version": "2.0.0", "status": "completed", "loop_count": 0,
}).encode()

CLAUDE_STOP = json.dumps({
    "session_id": "bench", "transcript_path": "/tmp/bench.jsonl", "cwd": "/tmp",
    "permission_mode": "default", "hook_event_name": "Stop", "stop_hook_active": False,
    "last_assistant_message": "done",
}).encode()


def child_env(home: Path, pycache: Path) -> dict[str, str]:
    """The environment every measured process runs with (baseline included).

    Byte code goes to a private cache written during the warm-up runs, so a checkout run with
    ``PYTHONDONTWRITEBYTECODE`` (tox sets it) is not measured compiling source on every start.
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FM_", "FIRSTMATE_")) and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    extra = []
    if importlib.util.find_spec("firstmate") is None:
        extra.append(str(REPO / "core"))
    if importlib.util.find_spec("firstmate_plugin_claude") is None:
        # Not installed: its sources, and the entry point fm finds a plugin by.
        extra += [str(REPO / "plugins" / "claude" / "src"), str(claude_site(pycache.parent))]
    if extra:
        env["PYTHONPATH"] = os.pathsep.join([*extra, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    env["FM_HOME"] = str(home)
    # Home secrets (each home's mark is checked with one) go beside the homes, never into the
    # user's own keys directory.
    env["FIRSTMATE_KEYS_DIR"] = str(pycache.parent / "keys")
    return env


def claude_site(tmp: Path) -> Path:
    """A site directory declaring the Claude plugin's entry point, for a checkout run where the
    plugin is not installed."""
    site = tmp / "site"
    info = site / "firstmate_plugin_claude-0.dev0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: firstmate-plugin-claude\n"
                                   "Version: 0.dev0\n")
    (info / "entry_points.txt").write_text(
        "[firstmate.plugins]\nclaude = firstmate_plugin_claude.hooks:plugin\n")
    return site


def fm_argv() -> tuple[list[str], str]:
    script = Path(sys.executable).with_name("fm")
    if script.is_file() and os.access(script, os.X_OK) and importlib.util.find_spec("firstmate"):
        return [str(script)], "fm"
    return [sys.executable, "-m", "firstmate"], "python -m firstmate"


def run_once(argv: list[str], env: dict[str, str], stdin: bytes) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env=env, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[:300]}")
    return took


def measure(label: str, argv_for: Callable[[int], list[str]], env: dict[str, str], stdin: bytes,
            runs: int, goal: float = GOAL_RATIO) -> dict[str, float | int | str]:
    """Time ``argv_for(i)`` against the baseline, *runs* times each, alternating."""
    baseline_argv = [sys.executable, "-c", "pass"]
    for i in range(3):  # warm the page cache and the .pyc files of both
        run_once(baseline_argv, env, b"")
        run_once(argv_for(-1 - i), env, stdin)
    base: list[float] = []
    cmd: list[float] = []
    for i in range(runs):
        args = argv_for(i)
        if i % 2:  # alternate which goes first
            cmd.append(run_once(args, env, stdin))
            base.append(run_once(baseline_argv, env, b""))
        else:
            base.append(run_once(baseline_argv, env, b""))
            cmd.append(run_once(args, env, stdin))
    pair = statistics.median(c / b for c, b in zip(cmd, base, strict=True))
    median_cmd, median_base = statistics.median(cmd), statistics.median(base)
    return {"label": label, "runs": runs, "median_ms": round(median_cmd * 1000, 2),
            "baseline_median_ms": round(median_base * 1000, 2),
            "ratio": round(median_cmd / median_base, 3), "pair_ratio": round(pair, 3),
            "goal": goal}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=int(os.environ.get("FM_BENCH_RUNS", "41")))
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = parser.parse_args(argv)
    fm, how = fm_argv()
    tmp = Path(tempfile.mkdtemp(prefix="fm-coldstart-"))
    try:
        idle_home, empty_home, fleet_home, away_home = (
            tmp / name for name in ("never-set-up", "empty", "fleet", "away"))
        pycache = tmp / "pycache"
        idle_env, empty_env, fleet_env, away_env = (
            child_env(h, pycache) for h in (idle_home, empty_home, fleet_home, away_home))
        # Set-up homes (outside the timing): one with nothing registered, one with a crew
        # (the database exists after the first append), one with a crew and away mode on.
        run_once([*fm, "wake", "append", "heartbeat", "setup", "heartbeat"], empty_env, b"")
        for env in (fleet_env, away_env):
            run_once([*fm, "crew", "add", "c1", "--pane", "%1"], env, b"")
            run_once([*fm, "wake", "append", "heartbeat", "setup", "heartbeat"], env, b"")
        run_once([*fm, "away", "on"], away_env, b"")
        stop = [*fm, "hook", "claude", "stop"]
        results = [
            measure("hook: never-used home", lambda i: stop, idle_env, CLAUDE_STOP, args.runs),
            measure("hook: crew session", lambda i: stop, {**fleet_env, "FM_CREW": "c1"},
                    CLAUDE_STOP, args.runs),
            measure("hook: nothing to supervise", lambda i: stop, empty_env, CLAUDE_STOP,
                    args.runs),
            measure("hook: away", lambda i: stop, away_env, CLAUDE_STOP, args.runs),
            measure("hook: foreign payload", lambda i: stop, fleet_env, CURSOR_STOP, args.runs),
            measure("fm wake append",
                    lambda i: [*fm, "wake", "append", "heartbeat", f"bench-{i}", "heartbeat"],
                    fleet_env, b"", args.runs, goal=PRODUCER_GOAL),
            measure("fm crew status",
                    lambda i: [*fm, "crew", "status", "c1", f"working: step {i}"],
                    fleet_env, b"", args.runs, goal=PRODUCER_GOAL),
        ]
        # The path with work to do: a supervised home's turn end loads the plugin (found through
        # the plugin index) and runs its hook. No goal: a reference that must not regress.
        supervised = measure("hook: supervised home", lambda i: stop, fleet_env, CLAUDE_STOP,
                             args.runs, goal=0.0)
        # Why the short commands lock through fcntl and not portalocker (firstmate.store.locks).
        portalocker = measure("import portalocker", lambda i: [sys.executable, "-c",
                                                               "import portalocker"],
                              idle_env, b"", args.runs, goal=0.0)  # (no goal: a reference)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ok = all(float(r["ratio"]) <= float(r["goal"]) for r in results)
    print(f"interpreter {sys.executable} ({how}), {args.runs} runs each, alternating with "
          f"`python -c pass`")
    for r in results:
        verdict = "met" if float(r["ratio"]) <= float(r["goal"]) else "MISSED"
        print(f"{r['label']:<28} {r['median_ms']:>7.1f} ms | baseline {r['baseline_median_ms']:.1f} ms "
              f"-> ratio {r['ratio']:.2f}x (per-pair median {r['pair_ratio']:.2f}x) "
              f"goal <= {r['goal']}x: {verdict}")
    print(f"{'hook: supervised home':<28} {supervised['median_ms']:>7.1f} ms | baseline "
          f"{supervised['baseline_median_ms']:.1f} ms -> ratio {supervised['ratio']:.2f}x "
          "(reference: the plugin loads and its hook runs)")
    print(f"{'python -c import portalocker':<28} {portalocker['median_ms']:>7.1f} ms | baseline "
          f"{portalocker['baseline_median_ms']:.1f} ms -> ratio {portalocker['ratio']:.2f}x "
          "(reference: why only long-running processes lock through portalocker)")
    emit("coldstart", {"bench": "coldstart", "command": how, "goal_ratio": GOAL_RATIO,
                       "portalocker_import": portalocker, "supervised_hook": supervised,
                       "producer_goal_ratio": PRODUCER_GOAL,
                       "goal_met": ok, "results": results})
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
