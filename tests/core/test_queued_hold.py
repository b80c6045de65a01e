"""The handover hold's bounds, polled in process with a chosen clock (docs/watcher.md, *The
handover hold*); the hold with real watcher processes is in test_watcher.py."""

from __future__ import annotations

import pytest
from firstmate.fast.drainsteps import FOLLOWED_KEY
from firstmate.store import deliveries, queue
from firstmate.store.database import kv_set, open_store
from firstmate.store.home import Home
from firstmate.watch.sources.base import PollContext
from firstmate.watch.sources.queued import QueuedSource


def _ctx(home: Home, now: float, *, successor: bool = True, hold: str = "5") -> PollContext:
    return PollContext(home=home, env={"FM_HANDOVER_HOLD": hold}, now=now, poll=1,
                       triage=lambda _line: None, handling_successor=successor)


def _undrained(home: Home, delivered_at: float, followed: str = "0") -> None:
    """A home whose primary drained before, a delivery at *delivered_at* no drain followed,
    and one queued row."""
    db = open_store(home)
    try:
        with db.transaction() as conn:
            deliveries.record_locked(conn, 4242, "token", "check: before")
            conn.execute("UPDATE deliveries SET at = ?", (delivered_at,))
            kv_set(conn, FOLLOWED_KEY, followed)
        queue.append(db, "check", "after", "check: after")
    finally:
        db.close()


def test_a_successor_holds_until_the_bound_then_wakes(fm_home: Home) -> None:
    _undrained(fm_home, 1000.0)
    source = QueuedSource(fm_home)
    assert source.poll(_ctx(fm_home, 1001.0)) is None
    assert source.next_due(_ctx(fm_home, 1001.0)) == 1005.0
    wake = source.poll(_ctx(fm_home, 1005.0))
    assert wake is not None and wake.reason == "check: after"
    assert source.next_due(_ctx(fm_home, 1005.0)) is None


def test_a_delivery_dated_in_the_future_holds_no_longer_than_the_bound(fm_home: Home) -> None:
    _undrained(fm_home, 9e12)
    source = QueuedSource(fm_home)
    assert source.poll(_ctx(fm_home, 1000.0)) is None
    assert source.next_due(_ctx(fm_home, 1000.0)) == 1005.0
    wake = source.poll(_ctx(fm_home, 1005.0))
    assert wake is not None and wake.reason == "check: after"


@pytest.mark.parametrize(("successor", "hold", "followed"), [
    (False, "5", "0"),     # not a handling successor
    (True, "0", "0"),      # the hold turned off
    (True, "5", "1"),      # a drain came after the newest delivery
    (True, "5", "junk"),   # a damaged mark: as if no drain had run
])
def test_no_hold(fm_home: Home, successor: bool, hold: str, followed: str) -> None:
    _undrained(fm_home, 1000.0, followed)
    wake = QueuedSource(fm_home).poll(_ctx(fm_home, 1001.0, successor=successor, hold=hold))
    assert wake is not None and wake.reason == "check: after"
