"""The handover hold's bounds, polled in process with a chosen clock (docs/watcher.md, *The
handover hold*: the queued source's, whose rules the watcher applies to every other source's
wake), and what a drain records; the hold with real watcher processes, crews and drains is in
test_watcher.py."""

from __future__ import annotations

import time

import attrs
import pytest
from firstmate.base import ownerlock
from firstmate.fast.drainsteps import FOLLOWED_KEY
from firstmate.store import deliveries, drain, queue
from firstmate.store.database import kv_set, open_store
from firstmate.store.doorbell import Doorbell
from firstmate.store.home import Home
from firstmate.watch.sources.base import PollContext, Wake
from firstmate.watch.sources.handover import HeldWakes
from firstmate.watch.sources.queued import QueuedSource


def _ctx(home: Home, now: float, *, successor: bool = True, hold: str = "5",
         triage: list[str] | None = None) -> PollContext:
    return PollContext(home=home, env={"FM_HANDOVER_HOLD": hold},
                       now=now, poll=1, triage=(triage if triage is not None else []).append,
                       handling_successor=successor)


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


# (the second: a delivery dated in the future holds no longer than the bound from the first hold)
@pytest.mark.parametrize("delivered_at", [1000.0, 9e12])
def test_a_successor_holds_until_the_bound_then_wakes(fm_home: Home, delivered_at: float) -> None:
    _undrained(fm_home, delivered_at)
    source = QueuedSource(fm_home)
    triage: list[str] = []
    first = 1001.0 if delivered_at == 1000.0 else 1000.0
    assert source.poll(_ctx(fm_home, first, triage=triage)) is None
    assert source.next_due(_ctx(fm_home, first)) == 1005.0
    assert [line for line in triage if "queued: row 1 waits up to" in line], triage
    wake = source.poll(_ctx(fm_home, 1005.0))
    assert wake is not None and wake.reason == "check: after"
    assert source.next_due(_ctx(fm_home, 1005.0)) is None
    source.close()


@pytest.mark.parametrize(("successor", "hold", "followed"), [
    (False, "5", "0"),     # not a handling successor
    (True, "0", "0"),      # the hold turned off
    (True, "5", "1"),      # a drain came after the newest delivery
    (True, "5", "junk"),   # a damaged mark: as if no drain had run
])
def test_no_hold(fm_home: Home, successor: bool, hold: str, followed: str) -> None:
    _undrained(fm_home, 1000.0, followed)
    source = QueuedSource(fm_home)
    wake = source.poll(_ctx(fm_home, 1001.0, successor=successor, hold=hold))
    assert wake is not None and wake.reason == "check: after"
    source.close()


def _followed(home: Home) -> str | None:
    db = open_store(home)
    try:
        with db.reading() as conn:
            row = conn.execute("SELECT value FROM kv WHERE key = ?", (FOLLOWED_KEY,)).fetchone()
    finally:
        db.close()
    return None if row is None else str(row[0])


def test_a_drain_records_what_it_followed_and_rings_only_when_that_moved(fm_home: Home) -> None:
    _undrained(fm_home, 1000.0)
    bell = Doorbell(fm_home)
    assert bell.open()
    db = open_store(fm_home)
    try:
        drain.follow(db)
        assert _followed(fm_home) == "1"
        assert bell.wait(5.0)  # rung: a successor holding a wake for this drain looks again
        drain.follow(db)
        assert not bell.wait(0.2)  # nothing moved: no ring
    finally:
        db.close()
        bell.close()


def test_a_drain_that_cannot_take_the_queue_lock_leaves_the_hold_to_run_out(
        fm_home: Home) -> None:
    _undrained(fm_home, 1000.0)
    holder = ownerlock.try_acquire(fm_home.lock_path("queue"), "queue", fm_home.root)
    assert holder is not None
    db = open_store(fm_home)
    try:
        started = time.monotonic()
        drain.follow(db, {"FM_STATUS_PRESENTATION_LOCK_TIMEOUT": "1"})
        assert time.monotonic() - started < 30  # bounded (1 s here), never an error
        assert _followed(fm_home) == "0"  # not recorded: a held wake waits out its hold
        ownerlock.release(holder)
        holder = None
        drain.follow(db)
        assert _followed(fm_home) == "1"
    finally:
        if holder is not None:
            ownerlock.release(holder)
        db.close()


@attrs.define(eq=False)
class _Stale:
    """A source with a wake to give whenever polled (a stale pane, a check's result)."""

    name: str = "stale"

    def poll(self, ctx: PollContext) -> Wake | None:
        return Wake("stale", "bravo", "stale: bravo")

    def commit(self, wake: Wake, ctx: PollContext) -> None:
        return None

    def next_due(self, ctx: PollContext) -> float | None:
        return None


def test_the_watcher_holds_another_source_until_a_ring_finds_the_drain_or_the_bound(
        fm_home: Home) -> None:
    _undrained(fm_home, 1000.0)
    db = open_store(fm_home)
    try:
        held, source, queued = HeldWakes(db), _Stale(), QueuedSource(fm_home)
        triage: list[str] = []
        ctx = _ctx(fm_home, 1001.0, triage=triage)
        wake = source.poll(ctx)
        assert wake is not None and held.holds(source, wake, ctx)
        assert held.held == {id(source): 1005.0}
        assert triage == ["stale: bravo waits up to 4.0s for the primary's drain of the wake "
                          "before it (FM_HANDOVER_HOLD)"]
        # The queued source holds its own wakes: the watcher does not hold them again.
        assert not held.holds(queued, Wake("check", "after", "check: after"), ctx)
        # Neither a ring while the drain is still owed nor time short of the bound releases it.
        assert held.released(True, 1002.0) == set()
        assert held.released(False, 1004.9) == set()
        assert held.released(False, 1005.0) == {id(source)} and not held.held
        # Held again (the bound already ran out: not held), then a drain follows and a ring
        # finds the hold over.
        assert not held.holds(source, wake, _ctx(fm_home, 1005.0))
        assert held.holds(source, wake, _ctx(fm_home, 1001.0))
        drain.follow(db)
        assert held.released(False, 1002.0) == set()  # (no ring: not looked at)
        assert held.released(True, 1002.0) == {id(source)} and not held.held
        # Not a handling successor: never held.
        assert not held.holds(source, wake, _ctx(fm_home, 1001.0, successor=False))
        queued.close()
    finally:
        db.close()


def test_a_rings_look_at_the_rows_makes_a_context_only_to_weigh_a_hold(fm_home: Home) -> None:
    """The watcher's answer to a ring looks at the queued rows before it makes a poll's context:
    the context is made only when there is a hold to weigh, and the hold is the poll's."""
    made: list[PollContext] = []

    def context(now: float) -> PollContext:
        made.append(_ctx(fm_home, now))
        return made[-1]

    _undrained(fm_home, 1000.0)
    source = QueuedSource(fm_home)
    wake = source.look(False, lambda: context(1001.0))  # not a handling successor: no hold
    assert wake is not None and wake.reason == "check: after" and made == []
    assert source.look(True, lambda: context(1001.0)) is None  # held: weighed in its context
    assert len(made) == 1 and source.next_due(made[0]) == 1005.0
    wake = source.look(True, lambda: context(1005.0))
    assert wake is not None and wake.reason == "check: after" and len(made) == 2
    source.close()
