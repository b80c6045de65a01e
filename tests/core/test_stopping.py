"""The record fm writes before it stops a watcher: which one, and whether a successor follows."""

from __future__ import annotations

import sqlite3

import pytest
from firstmate.store import stopping
from firstmate.store.database import Store, kv_set, open_store
from firstmate.store.home import Home


def test_a_replacement_is_expected_only_for_the_watcher_it_names(fm_home: Home) -> None:
    db = open_store(fm_home)
    try:
        assert not stopping.successor_expected(db, 41, "41:1.00:abc")  # nothing recorded
        stopping.record(db, 41, "41:1.00:abc", stopping.REPLACED)
        assert stopping.successor_expected(db, 41, "41:1.00:abc")
        assert stopping.successor_expected(db, 41, None)  # identity unknown: the pid decides
        assert not stopping.successor_expected(db, 42, "42:1.00:abc")  # another watcher
        assert not stopping.successor_expected(db, 41, "41:9.00:abc")  # a reused pid
        stopping.record(db, 41, "41:1.00:abc", stopping.STOPPED)
        assert not stopping.successor_expected(db, 41, "41:1.00:abc")  # --stop: none follows
    finally:
        db.close()


@pytest.mark.parametrize("raw", ["", "41", "41 41:1.00:abc", "41 41:1.00:abc replaced more",
                                 "041 41:1.00:abc replaced", "41 41:1.00:abc REPLACED"])
def test_a_malformed_record_expects_no_successor(fm_home: Home, raw: str) -> None:
    db = open_store(fm_home)
    try:
        with db.transaction() as conn:
            kv_set(conn, stopping.KEY, raw)
        assert not stopping.successor_expected(db, 41, "41:1.00:abc")
    finally:
        db.close()


def test_an_unreadable_store_leaves_the_arm_waiting_as_before(fm_home: Home) -> None:
    db = open_store(fm_home)
    db.close()
    fm_home.db.write_bytes(b"not a database, " * 512)
    broken = Store(fm_home)
    try:
        assert stopping.successor_expected(broken, 41, "41:1.00:abc")
        stopping.record(broken, 41, "41:1.00:abc", stopping.STOPPED)  # never raises
    finally:
        broken.close()


def test_a_stop_is_never_held_back_by_a_busy_store(fm_home: Home,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stopping, "RECORD_BOUND", 0.2)
    db = open_store(fm_home)
    holder = sqlite3.connect(fm_home.db, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the store's write lock
        stopping.record(db, 41, "41:1.00:abc", stopping.REPLACED)  # gives up at its bound
        holder.execute("ROLLBACK")
        assert not stopping.successor_expected(db, 41, "41:1.00:abc")
    finally:
        holder.close()
        db.close()
