"""The wake at the floor: append → reason line against the least a durable pushed wake costs.

Run with ``python bench/floor.py`` (needs tmux; stdlib and psutil). Four measurements,
alternated sample by sample in the same run (which one goes first alternates too), so the load
other work puts on the machine falls on all alike (the fourth, a floor whose reader also
commits a delivery record, is the reference described below):

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

**The floor with the guarantees.** The same, with what each of fm's guarantees costs at its
least, done with bare calls (docs/watcher.md, *What a wake costs*, names them): the writer sees
the spool idle (one ``lstat``), takes the queue lock (``open``, ``flock``) and writes its owner
record, and in its one transaction reads the downtime evidence, takes a sequence number from a
counter and inserts the row and its marker; after the ring it clears the record and lets the
lock go. The reader checks its grounds (two ``stat`` calls), runs the queued source's statement
(the watermark with the unclaimed, well-formed rows above it), blocks stop signals, removes its
beacon and tells its "arm" (a pipe) before it prints.

Which floor applies: the watcher prints the reason line *before* it records the delivery
(docs/watcher.md, *An actionable close*): the queued row is the durable record of the wake, the
line is only its notification, and the delivery ledger is what an arm that lost sight of the
line reads after the watcher has exited, so nothing durable stands between the ring and the
line but the append's own commit. The one-fsync floor is the goal's, with the guarantees
counted in it, as the goal allows. The variant in which the reader commits a delivery record (a
second fsync) before it prints is measured too, as a reference for a design that would need one.

Goals: fm p50 ≤ 1.5× the guarded floor's p50, fm p99 ≤ 2× its p99 (the ratios to the bare floor
are printed too). The run prints each distribution (p50/p90/p99), the ratios, and the machine's
load average while it ran; the last line is one JSON object. Knobs: ``FM_BENCH_FLOOR_PAIRS``
(samples of each, default 200).
"""

from __future__ import annotations

import fcntl
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
#: Waits in the kernel that mean "blocked waiting for a ring": a receive on the doorbell (and
#: select or poll, for a watcher that waits so).
_WAITING = ("__skb_wait_for_more_packets", "do_select", "do_sys_poll", "poll_schedule_timeout",
            "core_sys_select")

# The floor's reader: the database open, blocked on the datagram socket; on a ring it selects
# the rows past the last it printed and prints each (after committing a delivery record of its
# own first, a second fsync, when asked to).
READER = """
import os, signal, socket, sqlite3, sys
db, addr, mode = sys.argv[1], sys.argv[2], sys.argv[3]
durable, guarded = mode == "durable", mode == "guarded"
conn = sqlite3.connect(db, isolation_level=None)
conn.execute("PRAGMA journal_mode = WAL")
conn.execute("PRAGMA synchronous = FULL")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(addr)
last = conn.execute("SELECT coalesce(max(seq), 0) FROM wakes").fetchone()[0]
here = os.path.dirname(db)
beacon = db + ".beacon"
ROWS = ("SELECT m.value, seq, kind, key, payload FROM "
        "(SELECT (SELECT value FROM kv WHERE key = 'watermark') AS value) AS m "
        "LEFT JOIN wakes ON seq > ? AND (claim IS NULL OR claim NOT IN ('main', 'branch')) "
        "AND typeof(kind) = 'text' AND typeof(key) = 'text' AND typeof(payload) = 'text' "
        "ORDER BY seq")
STOPS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
out = sys.stdout
out.write("ready\\n"); out.flush()
while True:
    if guarded:
        os.close(os.open(beacon, os.O_WRONLY | os.O_CREAT, 0o600))
    sock.recv(64)
    if guarded:
        # The grounds (two stats), the one statement that reads the watermark with the
        # never-presented rows above it, stop signals blocked and the beacon removed.
        os.stat(db); os.stat(here)
        rows = [r[1:] for r in conn.execute(ROWS, (last,)).fetchall() if r[1] is not None]
        signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
        os.unlink(beacon)
    else:
        rows = conn.execute("SELECT seq, kind, key, payload FROM wakes WHERE seq > ? "
                            "ORDER BY seq", (last,)).fetchall()
    for seq, kind, key, payload in rows:
        last = seq
        if durable:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO delivered (seq) VALUES (?)", (seq,))
            conn.execute("COMMIT")
        if guarded:  # (its arm hears of the line first: a reader that dies now loses nothing)
            os.write(2, ("direct: " + payload + "\\n").encode())
        out.write(payload + "\\n"); out.flush()
    if guarded:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
"""


class Floor:
    """A database, a datagram socket and the reader waiting on it; :meth:`sample` times one.

    *mode*: ``bare`` (the floor), ``durable`` (the reader commits a delivery record before it
    prints: a second fsync) or ``guarded`` (the floor with the least each of fm's guarantees
    costs, done with bare calls: :meth:`_guarded` and the reader's ``guarded`` branch)."""

    def __init__(self, tmp: Path, name: str, mode: str) -> None:
        self.mode = mode
        self.db_path = tmp / f"{name}.db"
        self.addr = str(tmp / f"{name}.sock")
        self.lock_path = str(tmp / f"{name}.lock")
        self.spool = tmp / f"{name}.spool"
        self.spool.mkdir()
        self.conn = sqlite3.connect(self.db_path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute("CREATE TABLE wakes (seq INTEGER PRIMARY KEY, at REAL, kind TEXT, "
                          "key TEXT, payload TEXT, claim TEXT)")
        self.conn.execute("CREATE TABLE delivered (seq INTEGER PRIMARY KEY)")
        self.conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT)")
        self.conn.execute("CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER)")
        self.conn.execute("CREATE TABLE episode (id INTEGER PRIMARY KEY, status TEXT)")
        self.conn.execute("INSERT INTO episode VALUES (1, 'pending')")
        self.reader = subprocess.Popen(
            [sys.executable, "-c", READER, str(self.db_path), self.addr, mode],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            # (the guarded reader's announcements go to a pipe nobody reads, as a watcher's
            # go to its arm's, which reads them when the watcher exits)
            stderr=subprocess.PIPE if mode == "guarded" else None)
        if read_line(self.reader, DEADLINE) != "ready":
            raise SystemExit("the floor's reader did not start")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.count = 0

    def sample(self) -> tuple[float, float]:
        """(call → printed line, commit and ring returned → printed line) in seconds."""
        quiesce()
        self.count += 1
        payload = f"check: floor {self.count}"
        guarded = self.mode == "guarded"
        t0 = time.perf_counter()
        if guarded:
            self._guarded(payload)
        else:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute("INSERT INTO wakes (at, kind, key, payload) VALUES (?, ?, ?, ?)",
                              (time.time(), "check", f"floor-{self.count}", payload))
            self.conn.execute("COMMIT")
            self.sock.sendto(b"!", self.addr)
        t1 = time.perf_counter()
        line = read_line(self.reader, DEADLINE)
        t2 = time.perf_counter()
        if line != payload:
            raise SystemExit(f"the floor's reader printed {line!r}")
        if self.reader.stderr is not None:  # (written before the line: there, read at once)
            os.read(self.reader.stderr.fileno(), 65536)
        return t2 - t0, t2 - t1

    def _guarded(self, payload: str) -> None:
        """The floor's insert and ring with the producer's guarantees, each its least: the
        spool seen idle (one lstat), the queue lock taken and its owner record written, the
        downtime evidence read, a sequence number from the counter, the row and its marker,
        one commit, the ring, the record cleared and the lock let go."""
        conn = self.conn
        os.lstat(self.spool)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.pwrite(fd, (f'{{"pid": {os.getpid()}, "token": "{self.count}", "role": "queue", '
                       f'"at": {time.time()}}}').encode(), 0)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("SELECT status FROM episode WHERE id = 1").fetchone()
        counter, top = conn.execute(
            "SELECT (SELECT value FROM counters WHERE name = 'seq'), "
            "(SELECT coalesce(max(seq), 0) FROM wakes)").fetchone()
        seq = max(counter or 0, top) + 1
        conn.execute("INSERT INTO counters VALUES ('seq', ?) ON CONFLICT (name) DO UPDATE SET "
                     "value = excluded.value", (seq,))
        conn.execute("INSERT INTO wakes (seq, at, kind, key, payload) VALUES (?, ?, ?, ?, ?)",
                     (seq, time.time(), "check", f"floor-{self.count}", payload))
        conn.execute("INSERT INTO kv VALUES (?, ?)", ("led." + os.urandom(8).hex(), str(seq)))
        conn.execute("COMMIT")
        self.sock.sendto(b"!", self.addr)
        os.ftruncate(fd, 0)
        os.close(fd)

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
    guarded: list[float] = []
    guarded_after: list[float] = []
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
    one = two = three = None
    try:
        with Fleet(1, tmp) as fleet:
            one, two = Floor(tmp, "floor", "bare"), Floor(tmp, "floor2", "durable")
            three = Floor(tmp, "floor3", "guarded")
            for _ in range(3):  # warm every path (page cache, byte code) outside the figures
                one.sample()
                two.sample()
                three.sample()
                fm_sample(fleet)
            def take(into: list[float], after: list[float] | None,
                     sample: tuple[float, float]) -> None:
                into.append(sample[0] * 1000)
                if after is not None:
                    after.append(sample[1] * 1000)

            for i in range(PAIRS):
                if i % 2:
                    take(fm, fm_after, fm_sample(fleet))
                    take(guarded, guarded_after, three.sample())
                    take(floor, floor_after, one.sample())
                    take(twice, None, two.sample())
                else:
                    take(twice, None, two.sample())
                    take(floor, floor_after, one.sample())
                    take(guarded, guarded_after, three.sample())
                    take(fm, fm_after, fm_sample(fleet))
    finally:
        for f in (one, two, three):
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
    f, d, o, g = summary(fm), summary(floor), summary(twice), summary(guarded)
    fa, da, ga = summary(fm_after), summary(floor_after), summary(guarded_after)
    ratio50, ratio99 = f["p50_ms"] / d["p50_ms"], f["p99_ms"] / d["p99_ms"]
    gratio50, gratio99 = f["p50_ms"] / g["p50_ms"], f["p99_ms"] / g["p99_ms"]
    met = gratio50 <= GOAL_P50 and gratio99 <= GOAL_P99
    bare_met = ratio50 <= GOAL_P50 and ratio99 <= GOAL_P99
    for label, s in (("fm", f), ("floor (one fsync)", d), ("floor + guarantees", g),
                     ("floor + delivery fsync", o)):
        print(f"{label:<24} p50 {s['p50_ms']:6.2f} ms  p90 {s['p90_ms']:6.2f} ms  p99 "
              f"{s['p99_ms']:6.2f} ms  max {s['max_ms']:6.2f} ms")
    print(f"after the write returned: fm p50 {fa['p50_ms']:.2f} ms, p99 {fa['p99_ms']:.2f} ms; "
          f"the floor p50 {da['p50_ms']:.2f} ms, p99 {da['p99_ms']:.2f} ms; with the guarantees "
          f"p50 {ga['p50_ms']:.2f} ms, p99 {ga['p99_ms']:.2f} ms")
    print(f"fm / floor + guarantees (the goal's floor): p50 {gratio50:.2f}x (goal <= "
          f"{GOAL_P50:g}x), p99 {gratio99:.2f}x (goal <= {GOAL_P99:g}x): "
          f"{'met' if met else 'MISSED'}")
    print(f"fm / the bare floor: p50 {ratio50:.2f}x, p99 {ratio99:.2f}x "
          f"({'within' if bare_met else 'outside'} the goal's ratios); against the two-fsync "
          f"variant: p50 {f['p50_ms'] / o['p50_ms']:.2f}x, p99 {f['p99_ms'] / o['p99_ms']:.2f}x")
    print(f"load: {load['loadavg_start']} -> {load['loadavg_end']} (1/5/15 min), the machine "
          f"{load['machine_busy_pct']} % busy over {load['seconds']} s on {load['cpus']} CPUs")
    emit("floor", {"bench": "wake-floor", "pairs": PAIRS, "fm": f, "floor": d,
                   "floor_guarded": g, "floor_two_fsyncs": o, "fm_after_write": fa,
                   "floor_after_write": da, "floor_guarded_after_write": ga,
                   "ratio_p50": round(ratio50, 3), "ratio_p99": round(ratio99, 3),
                   "guarded_ratio_p50": round(gratio50, 3),
                   "guarded_ratio_p99": round(gratio99, 3), "goal_p50_ratio": GOAL_P50,
                   "goal_p99_ratio": GOAL_P99, "goal_met": met, "bare_goal_met": bare_met,
                   "applicable_floor": "one fsync and fm's guarantees at their least: the "
                                       "reason line precedes the delivery record",
                   "load": load})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
