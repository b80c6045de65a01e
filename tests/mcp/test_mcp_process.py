"""``fm mcp`` as a process: a stop (HUP, INT, TERM) ends it with 128 + the signal's number and
one line on stderr, after the call under way has finished; stdout carries protocol frames only,
to the end."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from firstmate.store.home import Home
from firstmate.store.locks import FileLock
from mcp_support import Raw, frame
from wakeq_support import fm


@pytest.mark.parametrize("stop", [signal.SIGHUP, signal.SIGINT, signal.SIGTERM])
def test_a_stop_ends_the_server_with_its_status_and_one_line(
        fm_home: Home, tmp_path: Path, stop: signal.Signals) -> None:
    raw = Raw(dict(os.environ), tmp_path)
    raw.initialize()
    raw.send(frame(id=2, method="tools/call", params={"name": "crew_list", "arguments": {}}))
    assert raw.answer(2)["result"]["isError"] is False
    raw.proc.send_signal(stop)
    assert raw.proc.wait(timeout=30) == 128 + stop
    assert raw.proc.stderr is not None
    err = raw.proc.stderr.read().decode()
    assert err.endswith(f"fm mcp: stopped by {stop.name}\n") and "Traceback" not in err
    raw.rest()  # (every line it wrote was a frame)


def test_a_stop_waits_for_the_call_under_way(fm_home: Home, tmp_path: Path) -> None:
    fm(fm_home, "wake", "append", "signal", "a", "one")
    raw = Raw({**os.environ, "FM_STATUS_PRESENTATION_LOCK_TIMEOUT": "3"}, tmp_path)
    raw.initialize()
    holder = FileLock(fm_home.lock_path("queue"), "queue", fm_home.root)
    holder.acquire()
    try:
        # The drain waits for the queue lock (at most 3 s, then it skips and changes nothing).
        raw.send(frame(id=2, method="tools/call", params={"name": "wake_drain", "arguments": {}}))
        time.sleep(0.5)  # (the call is under way: nothing to wait on from outside)
        stopped_at = time.monotonic()
        raw.proc.send_signal(signal.SIGTERM)
        assert raw.proc.wait(timeout=30) == 143
        assert time.monotonic() - stopped_at > 1.5  # it waited for the drain's bounded wait
    finally:
        holder.release()
    assert fm(fm_home, "wake", "query", "--json").stdout.count('"main": 1') == 1  # not claimed
    raw.rest()
