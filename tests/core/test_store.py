"""The SQLite store: file safety, pragmas, migrations, transactions and the sequence counter."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest
from firstmate.base.errors import LockTimeout, StateError
from firstmate.base.exitcodes import ExitCode
from firstmate.store import database as store
from firstmate.store.database import Migration, open_store, sql
from firstmate.store.home import Home
from wakeq_support import raw


def test_new_database_is_private_wal_full_sync_with_foreign_keys(fm_home: Home) -> None:
    db = open_store(fm_home)
    conn = db.connection()
    assert stat.S_IMODE(os.stat(fm_home.db).st_mode) == 0o600
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert store.schema_version(conn) == len(store.MIGRATIONS)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"wakes", "counters", "episode", "branch_grant", "deliveries", "kv", "set_aside",
            "legacy_imports", "legacy_lines"} <= tables
    for suffix in ("-wal", "-shm"):
        path = f"{fm_home.db}{suffix}"
        if os.path.exists(path):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_loose_mode_is_tightened(fm_home: Home) -> None:
    open_store(fm_home).close()
    os.chmod(fm_home.db, 0o644)
    open_store(fm_home).close()
    assert stat.S_IMODE(os.stat(fm_home.db).st_mode) == 0o600


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_symlinked_database_paths_are_refused(fm_home: Home, suffix: str) -> None:
    target = fm_home.root / "elsewhere"
    target.write_bytes(b"keep me")
    os.symlink(target, f"{fm_home.db}{suffix}")
    with pytest.raises(StateError) as err:
        open_store(fm_home)
    assert err.value.exit_code == ExitCode.STATE
    assert "symlink" in err.value.message
    assert target.read_bytes() == b"keep me"


def test_garbage_file_is_not_a_firstmate_database_and_is_kept(fm_home: Home) -> None:
    junk = b"this is not sqlite at all\n" * 100
    fm_home.db.write_bytes(junk)
    with pytest.raises(StateError) as err:
        open_store(fm_home)
    message = err.value.message
    assert err.value.exit_code == ExitCode.STATE
    assert message.startswith(f"{fm_home.db} is not a Firstmate database (")
    assert message.endswith("; move it aside and run fm again")
    assert "\n" not in message
    assert fm_home.db.read_bytes() == junk


def test_another_programs_sqlite_file_is_refused_untouched(fm_home: Home) -> None:
    conn = sqlite3.connect(str(fm_home.db))
    conn.execute("CREATE TABLE photos (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(StateError, match="another program"):
        open_store(fm_home)
    with sqlite3.connect(str(fm_home.db)) as check:
        assert [r[0] for r in check.execute("SELECT name FROM sqlite_master")] == ["photos"]
        assert check.execute("PRAGMA user_version").fetchone()[0] == 0


def test_database_from_a_newer_firstmate_is_refused(fm_home: Home) -> None:
    open_store(fm_home).close()
    with raw(fm_home) as conn:
        conn.execute("PRAGMA user_version = 999")
    with pytest.raises(StateError, match="newer Firstmate"):
        open_store(fm_home)


def test_directory_in_place_of_the_database(fm_home: Home) -> None:
    fm_home.db.mkdir()
    with pytest.raises(StateError, match=r"is not a Firstmate database .*directory"):
        open_store(fm_home)


def test_missing_state_directory_is_a_state_error(tmp_path: Path) -> None:
    home = Home(tmp_path / "nohome")
    with pytest.raises(StateError, match="does not exist"):
        open_store(home)


def test_unreadable_table_is_reported_as_not_ours(fm_home: Home) -> None:
    db = open_store(fm_home)
    with raw(fm_home) as conn:
        conn.execute("DROP TABLE episode")
    with pytest.raises(StateError, match="not a Firstmate database"), db.transaction() as conn:
        conn.execute("SELECT * FROM episode")


def test_migrations_run_in_order_once_and_atomically(fm_home: Home) -> None:
    applied: list[str] = []

    def step(name: str) -> store.Apply:
        def run(conn: sqlite3.Connection) -> None:
            applied.append(name)
            conn.execute(f"CREATE TABLE {name} (x)")
        return run

    path = fm_home.db
    conn = sqlite3.connect(str(path), isolation_level=None)
    migrations = [Migration("a", step("a")), Migration("b", sql("CREATE TABLE b (y)")),
                  Migration("c", step("c"))]
    store._migrate(conn, path, migrations)
    assert applied == ["a", "c"]
    assert store.schema_version(conn) == 3
    store._migrate(conn, path, migrations)
    assert applied == ["a", "c"]  # nothing re-applied

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE d (z)")
        raise RuntimeError("half-way")

    with pytest.raises(RuntimeError):
        store._migrate(conn, path, [*migrations, Migration("d", broken)])
    assert store.schema_version(conn) == 3
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'd'").fetchone()[0] == 0
    conn.close()


def test_transaction_commits_or_rolls_back_whole(fm_home: Home) -> None:
    db = open_store(fm_home)
    with db.transaction() as conn:
        store.kv_set(conn, "a", "1")
    with pytest.raises(ValueError), db.transaction() as conn:
        store.kv_set(conn, "a", "2")
        store.kv_set(conn, "b", "2")
        raise ValueError("boom")
    with db.reading() as conn:
        assert store.kv_get(conn, "a") == "1"
        assert store.kv_get(conn, "b") is None


def test_transactions_do_not_nest(fm_home: Home) -> None:
    db = open_store(fm_home)
    with db.transaction(), pytest.raises(RuntimeError), db.transaction():
        pass


def test_begin_immediate_takes_the_write_lock_and_a_bounded_wait_times_out(fm_home: Home) -> None:
    first, second = open_store(fm_home), open_store(fm_home)
    with first.transaction():
        with pytest.raises(LockTimeout), second.transaction(timeout=0.2):
            pass  # pragma: no cover
        # Readers are never blocked by the writer (WAL).
        with second.reading() as conn:
            assert conn.execute("SELECT count(*) FROM wakes").fetchone()[0] == 0
    with second.transaction() as conn:
        store.kv_set(conn, "after", "ok")


def test_sequence_is_never_reset_or_reused(fm_home: Home) -> None:
    db = open_store(fm_home)
    with db.transaction() as conn:
        seqs = [store.next_seq(conn) for _ in range(3)]
        for s in seqs:
            conn.execute("INSERT INTO wakes (seq, at, kind, key, payload) VALUES (?, 1, 'signal', 'k', 'p')", (s,))
    assert seqs == [1, 2, 3]
    with db.transaction() as conn:
        conn.execute("DELETE FROM wakes")
    with db.transaction() as conn:
        assert store.next_seq(conn) == 4


def test_lost_or_malformed_counter_still_numbers_past_queued_rows(fm_home: Home) -> None:
    db = open_store(fm_home)
    with raw(fm_home) as conn:
        conn.execute("INSERT INTO wakes (seq, at, kind, key, payload) VALUES (41, 1, 'signal', 'k', 'p')")
        conn.execute("UPDATE counters SET value = 'garbage'")
    with db.transaction() as conn:
        assert store.next_seq(conn) == 42
    with raw(fm_home) as conn:
        conn.execute("DELETE FROM counters")
    with db.transaction() as conn:
        assert store.next_seq(conn) == 42  # 42 is not queued, 41 is: past the queue
        assert store.last_seq(conn) == 42
        assert store.advance_seq(conn, 100) == 100
        assert store.next_seq(conn) == 101


def test_set_aside_is_bounded_to_the_newest(fm_home: Home) -> None:
    db = open_store(fm_home)
    with db.transaction() as conn:
        for i in range(store.SET_ASIDE_KEEP + 10):
            store.set_aside(conn, "test", f"record {i}")
    with db.reading() as conn:
        kept = [r[0] for r in conn.execute("SELECT record FROM set_aside ORDER BY id")]
    assert len(kept) == store.SET_ASIDE_KEEP
    assert kept[-1] == f"record {store.SET_ASIDE_KEEP + 9}"
    assert kept[0] == "record 10"


def test_connection_is_reopened_after_fork(fm_home: Home) -> None:
    db = open_store(fm_home)
    parent_conn = db.connection()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            ok = db.connection() is not parent_conn
            with db.transaction() as conn:
                store.kv_set(conn, "child", "yes")
            os._exit(0 if ok else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with db.reading() as conn:
        assert store.kv_get(conn, "child") == "yes"
