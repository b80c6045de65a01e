"""FleetScan: the watcher's one look at state/crew per poll answers what the crew store would."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from firstmate.base.errors import StateError
from firstmate.store import crew
from firstmate.store.crewscan import FleetScan
from firstmate.store.home import Home


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home").ensure()


def test_an_empty_or_absent_registry_lists_nothing(home: Home) -> None:
    assert FleetScan(home).scan() == ()
    crew.add(home, "a", "%1")
    crew.remove(home, "a")
    assert FleetScan(home).scan() == ()


def test_the_scan_lists_what_crew_list_lists_in_its_order(home: Home) -> None:
    for name, pane in [("a", "%1"), ("a-b", "%2"), ("a.status", "%3"), ("b_2", "s:1.0")]:
        crew.add(home, name, pane)
    crew.append_status(home, "a", "working: x")
    crew.mark_turn_ended(home, "a-b")
    # A replace's leftover temporary file and a stray name are not crews.
    (home.crew_dir / ".a.pane.tmp.123").write_text("%9\n")
    (home.crew_dir / "notes.txt").write_text("x\n")
    assert FleetScan(home).scan() == crew.list(home)
    assert [c.name for c in crew.list(home)] == ["a-b", "a", "a.status", "b_2"]


def test_a_changed_registration_is_read_again(home: Home) -> None:
    scan = FleetScan(home)
    crew.add(home, "a", "%1")
    assert [c.pane for c in scan.scan()] == ["%1"]
    crew.add(home, "a", "%7", replace=True)
    assert [c.pane for c in scan.scan()] == ["%7"]
    crew.add(home, "b", "%2")
    assert [(c.name, c.pane) for c in scan.scan()] == [("a", "%7"), ("b", "%2")]
    crew.remove(home, "a")
    assert [c.name for c in scan.scan()] == ["b"]


def test_files_and_texts_follow_the_directory(home: Home) -> None:
    scan = FleetScan(home)
    crew.add(home, "a", "%1")
    scan.scan()
    assert scan.stat("a", crew.STATUS) is None
    assert scan.text("a", crew.SIGNAL_CURSOR) is None
    cursor = home.crew_dir / "a.signal-cursor"
    crew.write_cursor(cursor, crew.Cursor(5, 10))
    assert scan.text("a", crew.SIGNAL_CURSOR) is None  # not there at the last scan
    scan.scan()
    assert scan.text("a", crew.SIGNAL_CURSOR) == "5 10\n"
    crew.write_cursor(cursor, crew.Cursor(5, 20))
    scan.scan()
    assert scan.text("a", crew.SIGNAL_CURSOR) == "5 20\n"
    # Written in place (same inode), longer: the size differs, so it is read again.
    with open(cursor, "r+b") as fh:
        fh.write(b"5 300\n")
    scan.scan()
    assert scan.text("a", crew.SIGNAL_CURSOR) == "5 300\n"
    crew.append_status(home, "a", "done: x")
    scan.scan()
    st = scan.stat("a", crew.STATUS)
    assert st is not None and st.st_size == os.path.getsize(home.crew_dir / "a.status")
    os.unlink(cursor)
    scan.scan()
    assert scan.text("a", crew.SIGNAL_CURSOR) is None


def test_symlinks_are_refused_as_the_crew_store_refuses_them(home: Home, tmp_path: Path) -> None:
    crew.add(home, "a", "%1")
    (tmp_path / "elsewhere").write_text("5 10\n")
    (home.crew_dir / "a.signal-cursor").symlink_to(tmp_path / "elsewhere")
    scan = FleetScan(home)
    scan.scan()
    with pytest.raises(StateError, match="symlink"):
        scan.text("a", crew.SIGNAL_CURSOR)
    (home.crew_dir / "b.pane").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StateError, match="symlink"):
        crew.list(home)
    with pytest.raises(StateError, match="symlink"):
        scan.scan()


def test_a_scan_asked_to_stop_goes_on_from_what_it_read(home: Home) -> None:
    from firstmate.store.crewscan import STOP_EVERY

    for i in range(STOP_EVERY * 3):
        crew.add(home, f"c{i:03d}", f"%{i}")
    scan = FleetScan(home)
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return True

    # A cold scan stops after each STOP_EVERY registrations it reads; what it read is kept.
    assert scan.scan_until(stop) is None
    assert scan.scan_until(stop) is None
    assert scan.scan_until(stop) is None
    assert len(asked) == 3
    assert scan.scan_until(stop) == crew.list(home)  # (all read before: nothing to stop for)
    assert len(asked) == 3
    assert FleetScan(home).scan_until(lambda: False) == crew.list(home)
    names = {f"c{i:03d}" for i in range(5)}
    assert {c.name for c in scan.scan_only(names, (crew.STATUS,))} == names
