"""Wake-queue benchmark: durable append throughput and drain + acknowledge of 10,000 rows.

Run with ``python bench/queue.py``. Each figure is printed next to a baseline measured in the
same run on the same disk: a plain fcntl-locked text-file append (the original implementation's
mechanism, without fsync), plus the same with fsync for reference. The last line is one JSON
object. Goal: acknowledging 10,000 rows takes at most 0.5 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORE = HERE.parent / "core"
sys.path.insert(0, str(CORE))

from _common import emit  # noqa: E402  (the script's own folder is first on sys.path)

PROCS = int(os.environ.get("FM_BENCH_PROCS", "8"))
APPENDS = int(os.environ.get("FM_BENCH_APPENDS", "1000"))
ROWS = int(os.environ.get("FM_BENCH_ROWS", "10000"))
ACK_GOAL_S = 0.5

# A worker connects, says "ready", waits for "go" on stdin, appends, then prints its seconds.
FM_WORKER = """
import os, sys, time
from firstmate.store import queue
from firstmate.store.home import Home
from firstmate.store.database import open_store
db = open_store(Home(__import__("pathlib").Path(sys.argv[1])))
count, name = int(sys.argv[2]), sys.argv[3]
print("ready", flush=True)
sys.stdin.readline()
t = time.perf_counter()
for i in range(count):
    queue.append(db, "signal", f"{name}-{i}", f"signal: bench {name} {i}")
print(time.perf_counter() - t, flush=True)
"""

FILE_WORKER = """
import fcntl, os, sys, time
path, count, name, sync = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
print("ready", flush=True)
sys.stdin.readline()
t = time.perf_counter()
for i in range(count):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, f"{int(time.time())}\\t{i}\\tsignal\\t{name}-{i}\\tsignal: bench {name} {i}\\n".encode())
    if sync:
        os.fsync(fd)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
print(time.perf_counter() - t, flush=True)
"""


def run_workers(code: str, args_for: list[list[str]]) -> float:
    """Start every worker, release them together, return the wall time until all finished."""
    env = {**os.environ, "PYTHONPATH": str(CORE)}
    procs = [subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for args in args_for]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    start = time.perf_counter()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        proc.communicate(timeout=3600)
        if proc.returncode != 0:
            raise SystemExit(f"a benchmark worker failed with exit {proc.returncode}")
    return time.perf_counter() - start


def bench_append(tmp: Path) -> dict[str, float]:
    from firstmate.store.database import open_store
    from firstmate.store.home import Home

    home = Home(tmp / "append-home").ensure()
    open_store(home).close()
    ours = run_workers(FM_WORKER, [[str(home.root), str(APPENDS), f"p{i}"] for i in range(PROCS)])
    with open_store(home).reading() as conn:
        count = conn.execute("SELECT count(*), count(DISTINCT seq) FROM wakes").fetchone()
    assert tuple(count) == (PROCS * APPENDS, PROCS * APPENDS), count
    plain = run_workers(FILE_WORKER, [[str(tmp / "plain.queue"), str(APPENDS), f"p{i}", "0"]
                                      for i in range(PROCS)])
    synced = run_workers(FILE_WORKER, [[str(tmp / "synced.queue"), str(APPENDS), f"p{i}", "1"]
                                       for i in range(PROCS)])
    return {"ops": PROCS * APPENDS, "seconds": ours, "per_second": PROCS * APPENDS / ours,
            "baseline_seconds": plain, "ratio": ours / plain,
            "baseline_fsync_seconds": synced, "ratio_fsync": ours / synced}


def file_drain_and_ack(path: Path, through: int) -> tuple[float, float]:
    """The baseline: read + dedupe under flock, then rewrite the file without rows <= cutoff."""
    import fcntl

    t = time.perf_counter()
    with open(path, "r+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        view: dict[tuple[bytes, bytes], bytes] = {}
        for line in fh.read().splitlines():
            fields = line.split(b"\t", 4)
            view[(fields[2], fields[3])] = line
        with open(os.devnull, "wb") as sink:
            sink.write(b"\n".join(view.values()))
    drained = time.perf_counter() - t
    t = time.perf_counter()
    with open(path, "r+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        keep = [line for line in fh.read().splitlines() if int(line.split(b"\t", 2)[1]) > through]
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(b"".join(line + b"\n" for line in keep))
        os.replace(tmp, path)
    return drained, time.perf_counter() - t


def bench_drain_ack(tmp: Path) -> dict[str, dict[str, float]]:
    from firstmate.store import drain, queue
    from firstmate.store.database import open_store
    from firstmate.store.home import Home

    home = Home(tmp / "drain-home").ensure()
    db = open_store(home)
    with queue.locked(db) as conn:
        for i in range(ROWS):
            queue.append_locked(conn, "signal", f"t{i}.status", f"signal: /h/state/t{i}.status")
    t = time.perf_counter()
    result = drain.drain(db, "main", env={})
    drained = time.perf_counter() - t
    assert len(result.rows) == ROWS and result.ack_through is not None and result.generation
    t = time.perf_counter()
    done = drain.acknowledge(db, "main", result.ack_through, result.generation, env={})
    acked = time.perf_counter() - t
    assert done.consumed == ROWS and done.retired

    plain = tmp / "drain.queue"
    plain.write_bytes(b"".join(
        f"{int(time.time())}\t{i + 1}\tsignal\tt{i}.status\tsignal: /h/state/t{i}.status\n".encode()
        for i in range(ROWS)))
    base_drain, base_ack = file_drain_and_ack(plain, ROWS)
    return {
        "drain": {"rows": ROWS, "seconds": drained, "baseline_seconds": base_drain,
                  "ratio": drained / base_drain},
        "ack": {"rows": ROWS, "seconds": acked, "baseline_seconds": base_ack,
                "ratio": acked / base_ack},
    }


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="fm-bench-") as name:
        tmp = Path(name)
        append = bench_append(tmp)
        print(f"append   {PROCS} procs x {APPENDS}: {append['seconds']:.3f} s "
              f"({append['per_second']:.0f}/s durable) | baseline flock append "
              f"{append['baseline_seconds']:.3f} s -> ratio {append['ratio']:.2f}x | "
              f"baseline flock+fsync {append['baseline_fsync_seconds']:.3f} s -> ratio "
              f"{append['ratio_fsync']:.2f}x")
        da = bench_drain_ack(tmp)
        for label in ("drain", "ack"):
            fig = da[label]
            print(f"{label:<8} {ROWS} rows: {fig['seconds']:.3f} s | baseline flock file "
                  f"{fig['baseline_seconds']:.3f} s -> ratio {fig['ratio']:.2f}x")
        ok = da["ack"]["seconds"] <= ACK_GOAL_S
        print(f"goal: ack of {ROWS} rows <= {ACK_GOAL_S} s: {'met' if ok else 'MISSED'}")
        summary = {"bench": "queue", "append": append, "drain": da["drain"], "ack": da["ack"],
                   "ack_goal_seconds": ACK_GOAL_S, "ack_goal_met": ok}
        emit("queue", summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
