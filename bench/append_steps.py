"""Where one uncontended append's time goes, step by step, against the floor's insert.

Run with ``python bench/append_steps.py`` (stdlib only, no tmux). A fresh home with its store
open, a datagram socket bound at its doorbell (as a waiting watcher's is), and
``FM_BENCH_STEPS`` (default 200) samples of each, alternated: one row appended through
``firstmate.store.queue.append``, and the floor's insert (one row into a database of its own,
WAL, ``synchronous=FULL``, one transaction). Each sample comes after the file system's journal
was committed and a short pause (``FM_BENCH_STEPS_PAUSE`` seconds, default 0.02), so caches are
about as cold as a settled arm's wake finds them. The append's steps are timed by wrapping the
functions it calls; the rest (the insert itself, the gate's close, the wrappers) is ``other``.
Printed: the p50 of each step and of the whole, and the floor's; the last line is one JSON
object.
"""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "core"))

from _common import emit  # noqa: E402

SAMPLES = int(os.environ.get("FM_BENCH_STEPS", "200"))
PAUSE = float(os.environ.get("FM_BENCH_STEPS_PAUSE", "0.02"))

#: (module, function) pairs the append calls, timed each time they are called.
STEPS = [
    ("firstmate.fast.appendspool", "open_gate"),
    ("firstmate.fast.appendspool", "lead_at_once"),
    ("firstmate.base.ownerlock", "write_record"),
    ("firstmate.base.dbconn", "start"),
    ("firstmate.fast.episoderow", "publish_downtime"),
    ("firstmate.fast.appendspool", "prune"),
    ("firstmate.fast.appendspool", "collect"),
    ("firstmate.fast.appendpath", "_doubts"),
    ("firstmate.base.dbconn", "next_seqs"),
    ("firstmate.fast.appendspool", "mark"),
    ("firstmate.base.dbconn", "commit"),
    ("firstmate.fast.bell", "ring_address"),
    ("firstmate.base.ownerlock", "release"),
    ("firstmate.fast.appendspool", "new_ident"),
    ("firstmate.fast.appendspool", "idle"),
]
#: Steps that enclose others (printed apart, not counted in ``other``).
OUTER = [
    ("firstmate.fast.appendpath", "commit"),
    ("firstmate.fast.appendpath", "_commit"),
    ("firstmate.fast.appendpath", "_transact"),
]

OUTER_NAMES = {f"all of {name}" for _, name in OUTER}
_spent: dict[str, float] = {}


def _wrap(module: Any, name: str, label: str) -> None:
    real = getattr(module, name, None)
    if real is None:  # a step this version does not have
        return

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            _spent[label] = _spent.get(label, 0.0) + time.perf_counter() - t0

    setattr(module, name, timed)


def _quiesce(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main() -> int:
    import importlib

    from firstmate.store import queue
    from firstmate.store.database import open_store
    from firstmate.store.home import Home

    for module, name in STEPS:
        _wrap(importlib.import_module(module), name, name)
    for module, name in OUTER:
        _wrap(importlib.import_module(module), name, f"all of {name}")
    tmp = tempfile.mkdtemp(prefix="fm-steps-")
    try:
        home = Home(Path(tmp) / "home").ensure()
        db = open_store(home)
        bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        bell.bind(str(Path(home.state) / "watcher.bell"))
        bell.setblocking(False)
        floor = sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)
        floor.execute("PRAGMA journal_mode = WAL")
        floor.execute("PRAGMA synchronous = FULL")
        floor.execute("CREATE TABLE wakes (seq INTEGER PRIMARY KEY, at REAL, payload TEXT)")
        steps: dict[str, list[float]] = {}
        whole: list[float] = []
        floors: list[float] = []

        def fm(i: int) -> None:
            _spent.clear()
            t0 = time.perf_counter()
            queue.append(db, "check", f"bench-{i}", f"check: bench {i}")
            total = time.perf_counter() - t0
            whole.append(total * 1e6)
            for name, spent in _spent.items():
                steps.setdefault(name, []).append(spent * 1e6)
            inner = sum(v for k, v in _spent.items() if k not in OUTER_NAMES)
            steps.setdefault("other", []).append((total - inner) * 1e6)
            try:
                while True:
                    bell.recv(64)
            except BlockingIOError:
                pass

        def flr(i: int) -> None:
            t0 = time.perf_counter()
            floor.execute("BEGIN IMMEDIATE")
            floor.execute("INSERT INTO wakes (at, payload) VALUES (?, ?)",
                          (time.time(), f"check: floor {i}"))
            floor.execute("COMMIT")
            floors.append((time.perf_counter() - t0) * 1e6)

        for i in range(5):  # warm both (byte code, page cache) outside the figures
            fm(-i)
            flr(-i)
        whole.clear()
        floors.clear()
        steps.clear()
        for i in range(SAMPLES):
            for run in ((fm, flr) if i % 2 else (flr, fm)):
                _quiesce(tmp)
                time.sleep(PAUSE)
                run(i)
        db.close()
        floor.close()
        bell.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    p50 = {name: round(statistics.median(v + [0.0] * (len(whole) - len(v))), 1)
           for name, v in steps.items()}
    fm50, floor50 = statistics.median(whole), statistics.median(floors)
    print(f"one uncontended append, p50 of {SAMPLES} samples (us), cold:")
    for name, value in sorted(p50.items(), key=lambda kv: (kv[0] in OUTER_NAMES, -kv[1])):
        print(f"  {name:<22} {value:8.1f}")
    print(f"  {'the whole append':<22} {fm50:8.1f}")
    print(f"  {'the floor insert':<22} {floor50:8.1f}   ratio {fm50 / floor50:.2f}x")
    emit("append_steps", {"bench": "append-steps", "samples": SAMPLES, "steps_p50_us": p50,
                          "append_p50_us": round(fm50, 1), "floor_p50_us": round(floor50, 1),
                          "ratio_p50": round(fm50 / floor50, 3)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

