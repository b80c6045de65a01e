"""What an uncontended append leaves out, and why that loses nothing: the spool's listing while
the directory is unchanged, marker pruning between the minutes, the owner record's truncation
of an empty file, the busy-timeout slices of a write that may wait as long as it takes, and a
sequence number allocated past the queued rows and never past its end."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.base import dbconn, ownerlock
from firstmate.base.errors import StateError
from firstmate.fast import appendspool
from firstmate.store import queue
from firstmate.store.database import Store, open_store
from firstmate.store.home import Home
from firstmate.store.locks import FileLock
from firstmate.testing.procs import eventually
from wakeq_support import raw, rows

SETTLE = 0.05  # (seconds) the spool's settling time in these tests, instead of two


@pytest.fixture
def db(fm_home: Home, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setattr(appendspool, "SETTLED_SECONDS", SETTLE)
    store = open_store(fm_home)
    try:
        yield store
    finally:
        store.close()


def settled_idle(home: Home, db: Store) -> Path:
    """Append until the spool directory, settled, is known idle: its folder."""
    folder = Path(appendspool.spool_dir(home.state))
    queue.append(db, "check", "first", "check: first")  # (makes the spool and its gate)
    eventually("the spool directory settles",
               lambda: time.time() - folder.stat().st_ctime > 2 * SETTLE)
    queue.append(db, "check", "settled", "check: settled")  # lists it: nothing to do
    assert appendspool.idle(home.state)
    return folder


def keys(home: Home) -> list[str]:
    return [str(key) for _seq, _kind, key, _payload, _claim in rows(home)]


def test_a_spool_directory_changed_lately_is_listed_at_every_commit(fm_home: Home,
                                                                    db: Store) -> None:
    queue.append(db, "check", "first", "check: first")
    # Made a moment ago: a change within the same clock tick could leave its ctime as it was.
    assert not appendspool.idle(fm_home.state)


def test_a_row_spooled_as_a_file_after_an_idle_listing_is_still_committed(fm_home: Home,
                                                                          db: Store) -> None:
    folder = settled_idle(fm_home, db)
    ident = appendspool.new_ident()  # as an earlier version's waiting producer spooled it
    (folder / ident).write_bytes(f"{time.time()!r}\x00check\x00old\x00check: old\x00\x00".encode())
    assert not appendspool.idle(fm_home.state)
    queue.append(db, "check", "next", "check: next")
    assert keys(fm_home) == ["first", "settled", "old", "next"]


def test_an_append_left_in_doubt_after_an_idle_listing_is_still_resolved(fm_home: Home,
                                                                         db: Store) -> None:
    folder = settled_idle(fm_home, db)
    # A producer whose commit ended in doubt, and did take effect: its row and marker.
    ident = f"{time.time_ns():020d}-4242-0badf00d"
    with raw(fm_home) as conn:
        seq = int(conn.execute("SELECT max(seq) + 1 FROM wakes").fetchone()[0])
        conn.execute("INSERT INTO wakes (seq, at, kind, key, payload) VALUES (?, ?, ?, ?, ?)",
                     (seq, time.time(), "check", "doubt", "check: doubt"))
        conn.execute("UPDATE counters SET value = ? WHERE name = 'wake_seq'", (seq,))
        conn.execute("INSERT INTO kv (key, value) VALUES (?, ?)", (f"led:{ident}", str(seq)))
    record = "\x00".join((ident, repr(time.time()), "check", "doubt", "check: doubt"))
    (folder / appendspool.DOUBT).write_bytes(b"\x01" + record.encode() + b"\x00\x00")
    assert queue.append(db, "check", "doubt", "check: doubt") == seq  # its retry: not again
    assert keys(fm_home).count("doubt") == 1
    assert not (folder / appendspool.DOUBT).exists()


def test_an_announcement_left_by_a_killed_leader_keeps_the_spool_from_idling(fm_home: Home,
                                                                              db: Store) -> None:
    folder = settled_idle(fm_home, db)
    (folder / appendspool.NOTE).write_bytes(b"")  # its leader killed before it withdrew it
    eventually("the spool directory settles",
               lambda: time.time() - folder.stat().st_ctime > 2 * SETTLE)
    queue.append(db, "check", "next", "check: next")
    # Listed at every commit while it is there: a producer always looks for an announcement.
    assert not appendspool.idle(fm_home.state)
    assert keys(fm_home) == ["first", "settled", "next"]


def test_a_gate_planted_after_an_idle_listing_is_refused_with_one_line(fm_home: Home,
                                                                       db: Store) -> None:
    folder = settled_idle(fm_home, db)
    (folder / appendspool.GATE).unlink()
    os.mkfifo(folder / appendspool.GATE)
    with pytest.raises(StateError, match="remove it and let fm recreate it"):
        queue.append(db, "check", "planted", "check: planted")
    assert "planted" not in keys(fm_home)


def test_a_process_prunes_the_markers_of_a_database_once_a_minute(fm_home: Home,
                                                                  db: Store) -> None:
    queue.append(db, "check", "first", "check: first")  # this process pruned this database
    old = f"{time.time_ns() - int((appendspool.ABANDONED_SECONDS + 5) * 1e9):020d}-1-old"
    with raw(fm_home) as conn:
        conn.execute("INSERT INTO kv (key, value) VALUES (?, ?)", (appendspool.LED + old, "1"))

    def marked() -> bool:
        with raw(fm_home) as conn:
            return conn.execute("SELECT count(*) FROM kv WHERE key = ?",
                                (appendspool.LED + old,)).fetchone()[0] == 1

    queue.append(db, "check", "second", "check: second")
    assert marked()  # within the minute: kept a little longer, which lets no row in twice
    assert appendspool._pruned is not None
    appendspool._pruned = (appendspool._pruned[0],
                           time.monotonic() - appendspool.PRUNE_EVERY - 1)
    queue.append(db, "check", "third", "check: third")
    assert not marked()  # a minute on, the next commit prunes


def test_an_owner_record_left_by_a_dead_holder_is_replaced_whole(fm_home: Home,
                                                                 db: Store) -> None:
    path = fm_home.lock_path("queue")
    stale = json.dumps({"acquired_at": 1.0, "home": "/elsewhere/" + "x" * 300,
                        "identity": "1:2:dead", "pid": 1, "role": "queue"}, sort_keys=True)
    path.write_text(stale)  # longer than ours: a record written over it alone would not parse
    fd = appendspool.lead_at_once(fm_home.state, path)
    assert fd >= 0
    try:
        pid, _identity, _at = ownerlock.write_record(fd, path, "queue", fm_home.root)
        record = json.loads(path.read_bytes())
        assert record["pid"] == pid == os.getpid() and record["home"] == str(fm_home.root)
        holder = FileLock(path, role="queue", home=fm_home.root).holder()
        assert holder is not None and holder.pid == os.getpid() and holder.verified
    finally:
        ownerlock.release(fd)
    assert path.read_bytes() == b""  # a free lock file names nobody
    queue.append(db, "check", "after", "check: after")  # from an empty file: the record alone
    assert path.read_bytes() == b""


def test_a_write_that_may_wait_as_long_as_it_takes_outwaits_a_short_busy_timeout(
        fm_home: Home, db: Store) -> None:
    holder = sqlite3.connect(str(fm_home.db), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    conn = db.connection()
    conn.execute("PRAGMA busy_timeout = 0")  # its own wait gives up at once
    done = threading.Event()
    failed: list[BaseException] = []

    def write() -> None:
        try:
            dbconn.start(conn, db.path)
            dbconn.commit(conn, db.path)
        except BaseException as exc:  # (reported below)
            failed.append(exc)
        done.set()

    thread = threading.Thread(target=write)
    thread.start()
    try:
        assert not done.wait(0.3)  # still waiting for the other writer, never failed
    finally:
        holder.execute("COMMIT")
        holder.close()
    thread.join(30)
    assert done.is_set() and not failed
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == dbconn.BUSY_TIMEOUT_MS


def test_the_sequence_is_allocated_past_the_queued_rows_and_never_past_its_end(fm_home: Home,
                                                                           db: Store) -> None:
    assert queue.append(db, "check", "one", "check: one") == 1
    with raw(fm_home) as conn:
        conn.execute("UPDATE counters SET value = 'damaged' WHERE name = 'wake_seq'")
    assert queue.append(db, "check", "two", "check: two") == 2  # past the queued rows
    with raw(fm_home) as conn:
        conn.execute("UPDATE counters SET value = ? WHERE name = 'wake_seq'", (2**63 - 2,))
    assert queue.append(db, "check", "last", "check: last") == 2**63 - 1
    with pytest.raises(StateError, match="the wake sequence is exhausted"):
        queue.append(db, "check", "none", "check: none")
    assert keys(fm_home) == ["one", "two", "last"]
    with raw(fm_home) as conn:
        assert conn.execute("SELECT value FROM counters").fetchall() == [(2**63 - 1,)]
