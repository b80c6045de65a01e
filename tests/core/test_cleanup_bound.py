"""FM_WATCHER_CLEANUP_LOCK_BOUND: the parser, and a TERM'd watcher facing a live queue-lock holder."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from firstmate.store import episodes
from firstmate.store.database import kv_get, open_store
from firstmate.testing.procs import eventually
from firstmate.watch.watcher import cleanup_lock_bound
from hypothesis import given
from hypothesis import strategies as st
from watch_support import Rig, rig

__all__ = ["rig"]

TABLE = [
    ("2", 2),
    ("1", 1),
    ("08", 8),
    ("010", 10),
    ("30", 30),
    (" 5 ", 5),
    ("0", 2),
    ("00", 2),
    ("000", 2),
    ("", 2),
    ("   ", 2),
    (None, 2),
    ("-1", 2),
    ("-08", 2),
    ("+3", 2),
    ("1.5", 2),
    ("3s", 2),
    ("two", 2),
    ("0x10", 2),
    ("1e3", 2),
    ("٣", 2),  # a non-ASCII digit is not a decimal integer here
    ("²", 2),
    ("4 4", 2),
]


@pytest.mark.parametrize(("raw", "expected"), TABLE)
def test_cleanup_bound_table(raw: str | None, expected: int) -> None:
    assert cleanup_lock_bound(raw) == expected


@given(st.integers(min_value=1, max_value=10**6), st.integers(min_value=0, max_value=3))
def test_any_positive_decimal_with_leading_zeros_is_itself(value: int, zeros: int) -> None:
    assert cleanup_lock_bound("0" * zeros + str(value)) == value


@given(st.text())
def test_the_parser_is_total(raw: str) -> None:
    assert cleanup_lock_bound(raw) >= 1


HOLD = """
import sys
from pathlib import Path
from firstmate.store.locks import FileLock
from firstmate.testing.procs import eventually
lock = FileLock(Path(sys.argv[1]), "test-holder", Path(sys.argv[2]))
lock.acquire(None)
print("acquired", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize(("raw", "bound"), [("00", 2), ("01", 1)])
def test_a_term_with_a_live_queue_lock_holder_ends_within_the_bound_and_keeps_evidence(
    rig: Rig, raw: str, bound: int
) -> None:
    # A handling successor skips the first-poll resurface, so once it is healthy it holds no
    # queue lock and its startup is complete.
    successor = {"FM_WATCH_PREDECESSOR_ARM_PID": "2", "FM_WATCHER_CLEANUP_LOCK_BOUND": raw}
    watch = rig.spawn("watch", env=successor)
    pid = eventually("the watcher to become healthy", rig.healthy_pid)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(rig.home.lock_path("queue")), str(rig.home.root)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=rig.env,
    )
    rig.extra.append(holder)
    assert holder.stdout is not None and holder.stdout.readline() == b"acquired\n"
    watch.popen.send_signal(signal.SIGTERM)
    assert watch.wait() == 143
    assert (f"the queue lock stayed held by live pid {holder.pid} for {bound}s"
            in watch.stderr())
    # The singleton is released (kernel locks cannot be kept by the dead), but the open-cycle
    # mark is kept: the next watcher publishes the downtime this one could not.
    assert rig.health().state == "none"  # type: ignore[attr-defined]
    db = open_store(rig.home)
    with db.reading() as conn:
        assert kv_get(conn, "watch.open") not in (None, "")
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait()
    nxt = rig.spawn("watch", env=successor)
    eventually("the next watcher", lambda: rig.healthy_pid() not in (None, pid))
    with db.reading() as conn:
        state = episodes.read(conn)
    db.close()
    assert isinstance(state, episodes.Episode)
    assert (state.status, state.kind) == ("pending", "downtime")
    nxt.popen.send_signal(signal.SIGTERM)
    assert nxt.wait() == 143
