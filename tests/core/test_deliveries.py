"""The terminal-delivery ledger: pid + identity matching, bounded to the newest records."""

from __future__ import annotations

from firstmate.store import deliveries
from firstmate.store.database import DELIVERIES_KEEP
from firstmate.store.home import Home
from wakeq_support import db_for


def test_a_delivery_is_found_only_by_its_pid_and_identity(fm_home: Home) -> None:
    db = db_for(fm_home)
    deliveries.record(db, 4242, "4242:100.00:abcdef0123456789", "signal: /h/state/t1.status")
    with db.reading() as conn:
        found = deliveries.find(conn, 4242, "4242:100.00:abcdef0123456789")
        assert found is not None and found.reason == "signal: /h/state/t1.status"
        assert deliveries.find(conn, 4242, "4242:999.00:abcdef0123456789") is None  # reused pid
        assert deliveries.find(conn, 4243, "4242:100.00:abcdef0123456789") is None


def test_the_newest_record_for_a_watcher_wins(fm_home: Home) -> None:
    db = db_for(fm_home)
    deliveries.record(db, 1, "id", "first")
    deliveries.record(db, 1, "id", "second")
    with db.reading() as conn:
        found = deliveries.find(conn, 1, "id")
    assert found is not None and found.reason == "second"


def test_the_ledger_keeps_only_the_newest_64(fm_home: Home) -> None:
    db = db_for(fm_home)
    for i in range(DELIVERIES_KEEP + 20):
        deliveries.record(db, 1000 + i, f"id{i}", f"reason {i}")
    with db.reading() as conn:
        kept = deliveries.recent(conn)
        assert len(kept) == DELIVERIES_KEEP
        assert kept[0].reason == f"reason {DELIVERIES_KEEP + 19}"
        assert deliveries.find(conn, 1000, "id0") is None
        assert deliveries.find(conn, 1000 + DELIVERIES_KEEP + 19, f"id{DELIVERIES_KEEP + 19}") is not None


def test_reasons_are_one_line_and_bounded(fm_home: Home) -> None:
    db = db_for(fm_home)
    deliveries.record(db, 7, "id", "check: out\nput\twith\x1b[1mcontrol" + "z" * 9000)
    with db.reading() as conn:
        found = deliveries.find(conn, 7, "id")
    assert found is not None
    assert found.reason.startswith("check: out put withcontrol")
    assert len(found.reason) == deliveries.REASON_MAX
