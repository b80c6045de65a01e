"""An append the disk left in doubt, and the retry that resolves it; and how a database that
reads as damaged is judged before anyone is told to move it aside.

The disk faults themselves are injected in tests/chaos/test_io_faults.py (fiu-run); here the
state an append left in doubt is arranged by hand, exactly as its producer leaves it: the row and
its leader's marker committed (or not), and the row framed in ``state/spool/.doubt``.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from types import ModuleType

import pytest
from firstmate.store.home import Home
from wakeq_support import fm, raw, rows

KIND, KEY, PAYLOAD = "signal", "c1.status", "signal: c1 done: tests pass"


def doubt_file(home: Home) -> Path:
    return home.state / "spool" / ".doubt"


def leave_in_doubt(home: Home, *, committed: bool, age: float = 1.0) -> tuple[str, int]:
    """What a producer whose commit ended in doubt leaves: its record in ``.doubt`` and, when
    the commit did take effect after all, the row with its leader's marker. Its id and seq."""
    ident = f"{time.time_ns() - int(age * 1e9):020d}-4242-0badf00d"
    at = time.time() - age
    seq = 0
    with raw(home) as conn:
        if committed:
            seq = int(conn.execute("SELECT coalesce(max(seq), 0) + 1 FROM wakes").fetchone()[0])
            conn.execute("INSERT INTO wakes (seq, at, kind, key, payload) VALUES (?, ?, ?, ?, ?)",
                         (seq, at, KIND, KEY, PAYLOAD))
            conn.execute("UPDATE counters SET value = ? WHERE name = 'wake_seq'", (seq,))
            conn.execute("INSERT INTO kv (key, value) VALUES (?, ?)", (f"led:{ident}", str(seq)))
    folder = home.state / "spool"
    folder.mkdir(mode=0o700, exist_ok=True)
    record = "\x00".join((ident, repr(at), KIND, KEY, PAYLOAD))
    with open(doubt_file(home), "ab") as out:
        out.write(b"\x01" + record.encode() + b"\x00\x00")
    return ident, seq


def append(home: Home, payload: str = PAYLOAD) -> int:
    done = fm(home, "wake", "append", KIND, KEY, payload)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def keyed(home: Home) -> list[int]:
    return [int(str(seq)) for seq, _k, key, _p, _c in rows(home) if key == KEY]


def test_the_retry_of_an_append_that_took_effect_after_all_is_not_queued_again(
        fm_home: Home) -> None:
    assert append(fm_home, "signal: an earlier row") == 1  # (the database exists)
    _ident, seq = leave_in_doubt(fm_home, committed=True)
    assert append(fm_home) == seq  # told the number of the row already queued
    assert keyed(fm_home) == [1, seq]  # and nothing inserted a second time
    assert not doubt_file(fm_home).exists()  # resolved: a later identical append is a new row
    assert append(fm_home) == seq + 1


def test_the_retry_of_an_append_that_never_took_effect_is_queued(fm_home: Home) -> None:
    assert append(fm_home, "signal: an earlier row") == 1
    leave_in_doubt(fm_home, committed=False)
    assert append(fm_home) == 2
    assert keyed(fm_home) == [1, 2]
    assert not doubt_file(fm_home).exists()


def test_only_an_identical_row_resolves_a_doubt(fm_home: Home) -> None:
    assert append(fm_home, "signal: an earlier row") == 1
    _ident, seq = leave_in_doubt(fm_home, committed=True)
    assert append(fm_home, "signal: c1 done: something else") == seq + 1
    assert doubt_file(fm_home).exists()  # still waiting for its own retry
    assert append(fm_home) == seq


def test_a_doubt_older_than_its_marker_is_dropped_unread(fm_home: Home) -> None:
    assert append(fm_home, "signal: an earlier row") == 1
    # (its marker is pruned by then too: the retry window is the markers' lifetime)
    leave_in_doubt(fm_home, committed=False, age=11 * 60)
    assert append(fm_home) == 2
    assert not doubt_file(fm_home).exists()


def test_a_doubt_file_that_is_not_a_file_blocks_no_append(fm_home: Home) -> None:
    assert append(fm_home, "signal: an earlier row") == 1
    doubt_file(fm_home).mkdir()
    assert append(fm_home) == 2
    assert append(fm_home) == 3  # (without a record, an identical append is a new row)


# --- is it damaged? --------------------------------------------------------------------------


def _dbfault() -> ModuleType:
    from firstmate.base import dbfault

    return dbfault


def test_a_whole_database_checks_out_whole(fm_home: Home) -> None:
    assert append(fm_home, "signal: row") == 1
    assert _dbfault().examine(fm_home.db) == ("ok", "")
    # (the check leaves nothing behind, and writes nothing)
    assert sorted(p.name for p in fm_home.state.iterdir() if p.name.startswith("firstmate.db")) \
        == ["firstmate.db"]


@pytest.mark.parametrize("damage", ["torn", "truncated", "not-sqlite"])
def test_a_damaged_database_is_found_damaged(fm_home: Home, damage: str) -> None:
    assert append(fm_home, "signal: row") == 1
    good = fm_home.db.read_bytes()
    broken = {"torn": good[:100] + b"\xff" * 4000 + good[4100:], "truncated": good[:3000],
              "not-sqlite": b"not a database at all\n" * 500}[damage]
    fm_home.db.write_bytes(broken)
    verdict, why = _dbfault().examine(fm_home.db)
    assert verdict == "damaged" and why, why
    assert fm_home.db.read_bytes() == broken


@pytest.mark.parametrize(("rows_found", "verdict"), [
    ([("ok",)], "ok"),
    # pages the disk would not give up: a fault in the reading, nothing about the file
    ([("*** in database main ***\nPage 5: unable to get the page. error code=266",)], "fault"),
    ([("*** in database main ***\nPage 5: unable to get the page. error code=8458\n"
       "Page 9: unable to get the page. error code=266",)], "fault"),
    # a page past the file's end (a short read) is damage, and so is everything else
    ([("*** in database main ***\nPage 5: unable to get the page. error code=522",)], "damaged"),
    ([("*** in database main ***\nPage 3: btreeInitPage() returns error code 11",)], "damaged"),
    ([("*** in database main ***\nPage 5: unable to get the page. error code=266\n"
       "On tree page 2 cell 0: invalid page number 99",)], "damaged"),
])
def test_quick_check_rows_tell_a_read_fault_from_damage(
        rows_found: list[tuple[object, ...]], verdict: str) -> None:
    assert _dbfault()._rows_verdict(rows_found)[0] == verdict


def test_a_database_that_cannot_be_checked_is_never_called_damaged(tmp_path: Path) -> None:
    missing = tmp_path / "gone.db"
    assert _dbfault().examine(missing)[0] == "unknown"
    assert not missing.exists()  # (never created by looking)


def test_a_transient_read_fault_is_not_advice_to_move_a_healthy_database(fm_home: Home) -> None:
    assert append(fm_home, "signal: row") == 1
    fault = sqlite3.DatabaseError("database disk image is malformed")
    error = _dbfault().read_failed(fm_home.db, fault, _dbfault().StateError("move it aside"))
    assert "move it aside" not in error.message
    assert "checks out whole" in error.message and "not written" in error.message
    assert os.path.getsize(fm_home.db) > 0
