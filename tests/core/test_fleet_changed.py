"""Which crews a ring makes a joined home's forwarder look at (firstmate.fleet.changed): the
crews the change journal names since its own record, not the host's whole fleet; a full pass at
its first look, every FM_FLEET_RESCAN, and whenever its record cannot be trusted finds what no
journal names (a line written by hand)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from firstmate.fast import crewreport
from firstmate.fleet.changed import RECORD, ChangedCrews
from firstmate.fleet.outbox import Outbox, out_dir
from firstmate.store import crew
from firstmate.store.crewchanges import OLD, ROTATE_BYTES, SEEN, Changes, Seen
from firstmate.store.home import Home

RESCAN = 15.0
T0 = 1_700_000_000.0


@pytest.fixture
def home(tmp_path: Path) -> Home:
    made = Home(tmp_path / "remote").ensure()
    for name in ("alice", "bob", "cat"):
        crew.add(made, name, "%1")
    crewreport.status(str(made.root), "alice", "working: first")  # (the journal is made)
    return made


def send_all(box: Outbox, names: list[str]) -> None:
    for name in names:
        for _event, cursor in box.take(name):
            box.advance(name, cursor)
        box.save(name)


def settled(home: Home) -> ChangedCrews:
    """A forwarder's reading after its first look (a full pass) sent everything."""
    changed = ChangedCrews(Outbox.open(home, "f1", "gpu"), RESCAN)
    found = changed.pending(T0)
    assert (found, changed.full_passes, changed.outbox.looked) == (["alice", "bob", "cat"], 1, 3)
    send_all(changed.outbox, found)
    assert changed.pending(T0 + 1) == []
    return changed


def by_hand(home: Home, name: str, text: str) -> None:
    """A line appended without fm: no journal entry, no ring."""
    with open(crew.path(home, name, crew.STATUS), "a") as fh:
        fh.write(f"{T0:.3f}\t{text}\n")


def test_a_ring_looks_only_at_the_crew_that_reported(home: Home) -> None:
    changed = settled(home)
    by_hand(home, "bob", "working: by hand")  # (something new a full pass would find)
    crewreport.status(str(home.root), "alice", "done: reported")
    assert changed.pending(T0 + 2) == ["alice"]
    assert (changed.outbox.looked, changed.full_passes) == (1, 1)
    assert [e.text for e, _ in changed.outbox.take("alice")] == ["done: reported"]


def test_a_crew_not_finished_with_is_looked_at_again(home: Home) -> None:
    changed = settled(home)
    by_hand(home, "bob", "working: by hand")
    # Named by no journal entry, but its pump had not finished: looked at, and kept pending.
    assert changed.pending(T0 + 2, busy=["bob"]) == ["bob"]
    assert changed.outbox.looked == 1
    assert changed.changes.load().pending == frozenset({"bob"})  # type: ignore[union-attr]
    assert changed.pending(T0 + 3) == []  # (its pump finished: no longer looked at)


def test_a_line_written_by_hand_is_found_by_the_periodic_full_pass(home: Home) -> None:
    changed = settled(home)
    by_hand(home, "bob", "working: by hand")
    assert changed.pending(T0 + RESCAN - 1) == []
    assert changed.next_full(T0 + RESCAN - 1) == pytest.approx(1.0)
    assert changed.pending(T0 + RESCAN) == ["bob"]
    assert (changed.full_passes, changed.outbox.looked) == (2, 3)
    assert [e.text for e, _ in changed.outbox.take("bob")] == ["working: by hand"]


@pytest.mark.parametrize("damage", ["missing", "corrupt", "another journal", "clock back"])
def test_a_record_that_cannot_be_trusted_means_a_full_pass(home: Home, damage: str) -> None:
    changed = settled(home)
    by_hand(home, "cat", "working: by hand")
    record = Path(out_dir(home)) / RECORD
    now = T0 + 2
    if damage == "missing":
        record.unlink()
    elif damage == "corrupt":
        record.write_bytes(b"changes-seen 1 x y\n\xff")
    elif damage == "another journal":
        journal = home.crew_dir / crewreport.CHANGES
        fresh = home.crew_dir / "fresh"
        fresh.write_text("alice\n" * 3)
        fresh.replace(journal)  # (a new file: not the one the record read)
    else:
        now = T0 - 60
    assert changed.pending(now) == ["cat"]
    assert (changed.full_passes, changed.outbox.looked) == (2, 3)


def test_a_fresh_forwarder_starts_with_a_full_pass(home: Home) -> None:
    settled(home)
    by_hand(home, "cat", "working: while the forwarder was down")
    again = ChangedCrews(Outbox.open(home, "f1", "gpu"), RESCAN)
    assert again.pending(T0 + 2) == ["cat"]
    assert again.full_passes == 1


def test_the_forwarder_and_the_watcher_keep_separate_records(home: Home) -> None:
    changed = settled(home)
    crewreport.status(str(home.root), "alice", "done: one")
    watcher = Changes(home)
    assert watcher.record == str(home.crew_dir / SEEN) != changed.changes.record
    assert watcher.load() is None  # (the forwarder wrote only its own)
    changed.pending(T0 + 2)
    assert not os.path.exists(watcher.record)
    record = changed.changes.load()
    assert record is not None and record.offset == 2 * len("alice\n")


def test_a_journal_one_reader_rotates_makes_the_others_next_look_a_full_pass(home: Home) -> None:
    changed = settled(home)
    watcher = Changes(home)
    journal = home.crew_dir / crewreport.CHANGES
    with journal.open("a") as fh:
        fh.write("alice\n" * (ROTATE_BYTES // 6 + 1))
    seen = Seen(*watcher.position(), frozenset(), T0)
    assert watcher.since(seen) == (set(), watcher.position())
    # The forwarder's full pass starts a new journal, which fills past the watcher's offset:
    # the watcher must not read it as the journal its record names.
    assert changed.pending(T0 + RESCAN) == []
    assert not journal.exists()
    # (kept aside, the old journal holds its inode: the new one cannot be given it)
    assert (home.crew_dir / (crewreport.CHANGES + OLD)).stat().st_ino == seen.inode
    crewreport.status(str(home.root), "bob", "done: after the rotation")
    with journal.open("a") as fh:
        fh.write("alice\n" * (ROTATE_BYTES // 6 + 2))
    assert watcher.since(seen) is None
    assert changed.pending(T0 + RESCAN + 1) == ["bob"]
