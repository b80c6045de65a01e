"""State files are replaced whole, also when two threads of one process replace the same file."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from firstmate.base.safepaths import atomic_write


def test_two_threads_replacing_one_file_each_write_whole_and_leave_no_temporary_file(
        tmp_path: Path) -> None:
    target = tmp_path / "state-file"
    payloads = (b"a" * 200_000, b"b" * 200_000)
    failures: list[str] = []
    torn: list[int] = []
    start = threading.Barrier(2)

    def write(data: bytes) -> None:
        start.wait()
        for _ in range(150):
            try:
                atomic_write(target, data, durable=False)
            except Exception as exc:  # (the old shared temporary name failed here)
                failures.append(repr(exc))
            seen = target.read_bytes()
            if seen not in payloads:
                torn.append(len(seen))

    threads = [threading.Thread(target=write, args=(data,)) for data in payloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == [] and torn == []
    assert target.read_bytes() in payloads
    assert os.listdir(tmp_path) == ["state-file"]
