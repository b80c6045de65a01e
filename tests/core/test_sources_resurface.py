"""The resurface source counts only work that waited before the watcher's startup safe point."""

from __future__ import annotations

from firstmate.store import episodes, queue
from firstmate.store.database import open_store
from firstmate.store.home import Home
from firstmate.watch.sources.base import PollContext
from firstmate.watch.sources.queued import QueuedSource
from firstmate.watch.sources.resurface import REASON, ResurfaceSource
from watch_support import episode


def _ctx(home: Home, startup_seq: int | None) -> PollContext:
    return PollContext(home=home, env={}, now=0.0, poll=1, triage=lambda _line: None,
                       startup_seq=startup_seq)


def _append(home: Home, payload: str) -> int:
    db = open_store(home)
    try:
        return queue.append(db, "signal", "builder", payload)
    finally:
        db.close()


def test_a_row_that_waited_before_the_claim_resurfaces(fm_home: Home) -> None:
    seq = _append(fm_home, "signal: builder done: WAITED")
    wake = ResurfaceSource(fm_home).poll(_ctx(fm_home, startup_seq=seq))
    assert wake is not None and wake.reason == REASON


def test_a_row_appended_after_the_claim_wakes_under_its_own_reason(fm_home: Home) -> None:
    # The watcher claimed an empty queue (startup_seq 0); the row landed before its first poll.
    _append(fm_home, "signal: builder done: LIVE")
    assert ResurfaceSource(fm_home).poll(_ctx(fm_home, startup_seq=0)) is None
    # Nothing was buried: any downtime evidence the append published is retired, not announced.
    state = episode(fm_home)
    assert not isinstance(state, episodes.Episode) or state.status == "acked"
    wake = QueuedSource(fm_home).poll(_ctx(fm_home, startup_seq=0))
    assert wake is not None and wake.reason == "signal: builder done: LIVE"


def test_without_a_known_safe_point_every_queued_row_counts(fm_home: Home) -> None:
    _append(fm_home, "signal: builder done: UNKNOWN-START")
    wake = ResurfaceSource(fm_home).poll(_ctx(fm_home, startup_seq=None))
    assert wake is not None and wake.reason == REASON


def _downtime(home: Home) -> None:
    db = open_store(home)
    try:
        with queue.locked(db) as conn:
            episodes.publish_downtime(conn)
    finally:
        db.close()


def test_an_open_decision_no_drain_presented_resurfaces(fm_home: Home) -> None:
    from firstmate.store import crew

    crew.add(fm_home, "beta", "%2")
    crew.append_status(fm_home, "beta", "needs-decision: key=x choose A or B")
    _downtime(fm_home)
    wake = ResurfaceSource(fm_home).poll(_ctx(fm_home, startup_seq=0))
    assert wake is not None and wake.reason == REASON


def test_an_open_decision_a_drain_presented_retires_the_recovery_silently(fm_home: Home) -> None:
    """The captain was shown it (OPEN DECISIONS repeats it on every drain) and left it open:
    a recovery with nothing else to show wakes no one for it."""
    from firstmate.app import drain_context
    from firstmate.store import crew

    crew.add(fm_home, "beta", "%2")
    crew.append_status(fm_home, "beta", "needs-decision: key=x choose A or B")
    presentation = drain_context.prepare(fm_home, [], env={})
    assert "beta [key=x] needs-decision: choose A or B" in presentation.lines
    presentation.commit()
    _downtime(fm_home)
    assert ResurfaceSource(fm_home).poll(_ctx(fm_home, startup_seq=0)) is None
    state = episode(fm_home)
    assert isinstance(state, episodes.Episode) and state.status == "acked"
    # Asked again after that drain: not yet presented, so it counts.
    crew.append_status(fm_home, "beta", "needs-decision: key=x choose A or B, now please")
    _downtime(fm_home)
    wake = ResurfaceSource(fm_home).poll(_ctx(fm_home, startup_seq=0))
    assert wake is not None and wake.reason == REASON
