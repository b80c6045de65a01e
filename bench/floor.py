"""The wake at the floor: append → reason line against the least a durable pushed wake costs.

Run with ``python bench/floor.py`` (needs tmux; stdlib and psutil). Two measurements,
alternated sample by sample in the same run (which one goes first alternates too), so the load
other work puts on the machine falls on both alike:

**The floor.** A process that already has an SQLite database open (WAL, ``synchronous=FULL``)
inserts one row in one transaction (one fsync) and rings a unix datagram socket; a waiting
reader, blocked in ``recv`` on that socket with the database open, wakes, selects the new row
and prints it. Timed from the call to the printed line.

**fm.** A settled ``fm arm`` (``FM_SIGNAL_GRACE=0``, a one-crew fleet on a private tmux server,
no harness plugin: ``bench/_fleet.py``), its watcher waiting on the doorbell, and one row
appended through ``firstmate.store.queue.append`` in this process; timed from the call until
the arm prints the reason line. Each sample starts the next arm of a chain (each the handling
successor of the one before, as continuity runs it) and waits until its watcher sits in its
doorbell wait with no child process, before the timing starts.

Which floor applies: the watcher prints the reason line *before* it records the delivery
(docs/watcher.md, *An actionable close*): the queued row is the durable record of the wake, the
line is only its notification, and the delivery ledger is what an arm that lost sight of the
line reads after the watcher has exited, so nothing durable stands between the ring and the
line but the append's own commit. The one-fsync floor is the goal's. The variant in which the
reader commits a delivery record (a second fsync) before it prints is measured too, as a
reference for a design that would need one.

Goals: fm p50 ≤ 1.5× the floor's p50, fm p99 ≤ 2× the floor's p99. The run prints both
distributions (p50/p90/p99), the ratios, and the machine's load average while it ran; the last
line is one JSON object. Knobs: ``FM_BENCH_FLOOR_PAIRS`` (samples of each, default 200).
"""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _common import emit  # the script's own folder is first on sys.path
from _fleet import DEADLINE, Fleet, need_tmux, pct, read_line

PAIRS = int(os.environ.get("FM_BENCH_FLOOR_PAIRS", "200"))
GOAL_P50, GOAL_P99 = 1.5, 2.0
#: Waits in the kernel that mean "blocked waiting for a ring" (select/poll on the doorbell).
_WAITING = ("do_select", "do_sys_poll", "poll_schedule_timeout", "core_sys_select")

# The floor's reader: the database open, blocked on the datagram socket; on a ring it selects
# the rows past the last it printed and prints each (after committing a delivery record of its
# own first, a second fsync, when asked to).
READER = """
import os, socket, sqlite3, sys
db, addr, durable = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
conn = sqlite3.connect(db, isolation_level=None)
conn.execute("PRAGMA journal_mode = WAL")
conn.execute("PRAGMA synchronous = FULL")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(addr)
last = conn.execute("SELECT coalesce(max(seq), 0) FROM wakes").fetchone()[0]
out = sys.stdout
out.write("ready\\n"); out.flush()
while True:
    sock.recv(64)
    for seq, payload in conn.execute("SELECT seq, payload FROM wakes WHERE seq > ? ORDER BY seq",
                                     (last,)).fetchall():
        last = seq
        if durable:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO delivered (seq) VALUES (?)", (seq,))
            conn.execute("COMMIT")
        out.write(payload + "\\n"); out.flush()
"""


class Floor:
    """A database, a datagram socket and the reader waiting on it; :meth:`sample` times one."""

    def __init__(self, tmp: Path, name: str, durable: bool) -> None:
        self.db_path = tmp / f"{name}.db"
        self.addr = str(tmp / f"{name}.sock")
        self.conn = sqlite3.connect(self.db_path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute("CREATE TABLE wakes (seq INTEGER PRIMARY KEY, at REAL, payload TEXT)")
        self.conn.execute("CREATE TABLE delivered (seq INTEGER PRIMARY KEY)")
        self.reader = subprocess.Popen(
            [sys.executable, "-c", READER, str(self.db_path), self.addr, "1" if durable else "0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        if read_line(self.reader, DEADLINE) != "ready":
            raise SystemExit("the floor's reader did not start")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.count = 0

    def sample(self) -> tuple[float, float]:
        """(call → printed line, commit and ring returned → printed line) in seconds."""
        quiesce()
        self.count += 1
        payload = f"check: floor {self.count}"
        t0 = time.perf_counter()
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute("INSERT INTO wakes (at, payload) VALUES (?, ?)", (time.time(), payload))
        self.conn.execute("COMMIT")
        self.sock.sendto(b"!", self.addr)
        t1 = time.perf_counter()
        line = read_line(self.reader, DEADLINE)
        t2 = time.perf_counter()
        if line != payload:
            raise SystemExit(f"the floor's reader printed {line!r}")
        return t2 - t0, t2 - t1

    def close(self) -> None:
        self.reader.kill()
        self.reader.wait()
        self.sock.close()
        self.conn.close()


def settled(fleet: Fleet, arm: subprocess.Popen[bytes]) -> None:
    """Wait until the arm's watcher waits on its doorbell, with no child (a tmux call) running,
    seen twice in a row: its first poll is over."""
    end = time.monotonic() + DEADLINE
    time.sleep(0.05)
    quiet = 0
    while quiet < 2:
        if time.monotonic() > end:
            raise SystemExit("the watcher never settled into its doorbell wait")
        try:
            watchers = psutil.Process(arm.pid).children()
            watcher = watchers[0] if len(watchers) == 1 else None
            waiting = (watcher is not None and not watcher.children()
                       and watcher.status() == psutil.STATUS_SLEEPING
                       and Path(f"/proc/{watcher.pid}/wchan").read_text().startswith(_WAITING))
        except (psutil.Error, OSError):
            waiting = False
        quiet = quiet + 1 if waiting else 0
        time.sleep(0.02)


#: A directory on the file system both databases live on (set by main).
_SCRATCH: list[str] = []


def quiesce() -> None:
    """Commit the file system's journal before a sample, as its periodic commit would have long
    before a real append: the set-up each sample makes (an arm and its watcher started, the
    last sample's close) must not ride the fsync it times, nor the other's. (An fsync of a
    directory commits the journal's running transaction.)"""
    fd = os.open(_SCRATCH[0], os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fm_sample(fleet: Fleet) -> tuple[float, float]:
    """(call → printed line, append returned → printed line) in seconds."""
    arm = fleet.start_arm()
    settled(fleet, arm)
    quiesce()
    return fleet.deliver(arm)


def summary(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(values), 3), "p90_ms": round(pct(values, 90), 3),
            "p99_ms": round(pct(values, 99), 3), "max_ms": round(max(values), 3)}


def main() -> int:
    need_tmux("bench/floor.py")
    tmp = Path(tempfile.mkdtemp(prefix="fm-floor-"))
    _SCRATCH.append(str(tmp))
    fm: list[float] = []
    floor: list[float] = []
    twice: list[float] = []
    # The part after the durable write returned (the row committed, the bell rung): the wake
    # path proper, without the commit both pay.
    fm_after: list[float] = []
    floor_after: list[float] = []
    print(f"append -> printed reason line: a settled fm arm against the floor (one SQLite row, "
          f"WAL, synchronous=FULL, one fsync; a datagram; a waiting reader prints it), "
          f"{PAIRS} alternated samples each (goal: fm p50 <= {GOAL_P50:g}x, p99 <= "
          f"{GOAL_P99:g}x the floor's)", flush=True)
    load_before = os.getloadavg()
    cpu_before = psutil.cpu_times()
    started = time.monotonic()
    one = two = None
    try:
        with Fleet(1, tmp) as fleet:
            one, two = Floor(tmp, "floor", False), Floor(tmp, "floor2", True)
            for _ in range(3):  # warm both paths (page cache, byte code) outside the figures
                one.sample()
                two.sample()
                fm_sample(fleet)
            def take(into: list[float], after: list[float] | None,
                     sample: tuple[float, float]) -> None:
                into.append(sample[0] * 1000)
                if after is not None:
                    after.append(sample[1] * 1000)

            for i in range(PAIRS):
                if i % 2:
                    take(fm, fm_after, fm_sample(fleet))
                    take(floor, floor_after, one.sample())
                    take(twice, None, two.sample())
                else:
                    take(twice, None, two.sample())
                    take(floor, floor_after, one.sample())
                    take(fm, fm_after, fm_sample(fleet))
    finally:
        for f in (one, two):
            if f is not None:
                f.close()
        shutil.rmtree(tmp, ignore_errors=True)
    wall = time.monotonic() - started
    cpu_after = psutil.cpu_times()
    busy = sum(cpu_after) - sum(cpu_before) - (cpu_after.idle - cpu_before.idle)
    load = {"loadavg_start": [round(x, 2) for x in load_before],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "machine_busy_pct": round(100 * busy / (sum(cpu_after) - sum(cpu_before)), 1),
            "seconds": round(wall, 1), "cpus": os.cpu_count()}
    f, d, o = summary(fm), summary(floor), summary(twice)
    fa, da = summary(fm_after), summary(floor_after)
    ratio50, ratio99 = f["p50_ms"] / d["p50_ms"], f["p99_ms"] / d["p99_ms"]
    met = ratio50 <= GOAL_P50 and ratio99 <= GOAL_P99
    for label, s in (("fm", f), ("floor (one fsync)", d), ("floor + delivery fsync", o)):
        print(f"{label:<24} p50 {s['p50_ms']:6.2f} ms  p90 {s['p90_ms']:6.2f} ms  p99 "
              f"{s['p99_ms']:6.2f} ms  max {s['max_ms']:6.2f} ms")
    print(f"after the write returned: fm p50 {fa['p50_ms']:.2f} ms, p99 {fa['p99_ms']:.2f} ms; "
          f"the floor p50 {da['p50_ms']:.2f} ms, p99 {da['p99_ms']:.2f} ms")
    print(f"fm / floor: p50 {ratio50:.2f}x (goal <= {GOAL_P50:g}x), p99 {ratio99:.2f}x (goal <= "
          f"{GOAL_P99:g}x): {'met' if met else 'MISSED'}; against the two-fsync variant: p50 "
          f"{f['p50_ms'] / o['p50_ms']:.2f}x, p99 {f['p99_ms'] / o['p99_ms']:.2f}x")
    print(f"load: {load['loadavg_start']} -> {load['loadavg_end']} (1/5/15 min), the machine "
          f"{load['machine_busy_pct']} % busy over {load['seconds']} s on {load['cpus']} CPUs")
    emit("floor", {"bench": "wake-floor", "pairs": PAIRS, "fm": f, "floor": d,
                   "floor_two_fsyncs": o, "fm_after_write": fa, "floor_after_write": da, "ratio_p50": round(ratio50, 3),
                   "ratio_p99": round(ratio99, 3), "goal_p50_ratio": GOAL_P50,
                   "goal_p99_ratio": GOAL_P99, "goal_met": met,
                   "applicable_floor": "one fsync: the reason line precedes the delivery record",
                   "load": load})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
