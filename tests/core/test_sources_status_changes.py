"""The status source between full polls: it looks at the crews the change journal names and the
ones it left pending, not at the whole fleet (firstmate.watch.sources.changes), and finds what
it would have found by looking at every crew. Real files; time is passed explicitly."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

import attrs
import pytest
from firstmate.fast.crewreport import CHANGES
from firstmate.store import crew
from firstmate.store.crewchanges import OLD, ROTATE_BYTES, SEEN
from firstmate.store.crewscan import FleetScan
from firstmate.store.home import Home
from firstmate.watch.sources.base import PollContext, Wake
from firstmate.watch.sources.status import StatusSource

T0 = float(int(time.time())) - 100_000
CREWS = 40


@attrs.define(eq=False)
class CountingScan(FleetScan):
    """A fleet scan that records what each poll asked it for."""

    full: int = attrs.field(default=0, init=False)
    only: list[set[str]] = attrs.field(factory=list, init=False)

    def scan(self) -> tuple[crew.Crew, ...]:
        self.full += 1
        return super().scan()

    def scan_only(self, names: Iterable[str], suffixes: Iterable[str]) -> tuple[crew.Crew, ...]:
        names = set(names)
        self.only.append(names)
        return super().scan_only(names, suffixes)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home").ensure()
    for i in range(CREWS):
        crew.add(h, f"w{i}", f"p{i}")
    return h


def source(home: Home) -> tuple[StatusSource, CountingScan]:
    scan = CountingScan(home)
    return StatusSource(home, fleet=scan), scan


def ctx(home: Home, now: float, *, full: bool, triage: list[str] | None = None,
        **env: str) -> PollContext:
    log = triage if triage is not None else []
    return PollContext(home=home, env={"FM_SIGNAL_GRACE": "30", **env}, now=now, poll=1,
                       triage=log.append, full=full)


def fire(src: StatusSource, home: Home, now: float, *, full: bool) -> Wake | None:
    c = ctx(home, now, full=full)
    wake = src.poll(c)
    if wake is not None:
        src.commit(wake, c)
    return wake


def test_a_poll_between_full_polls_looks_only_at_the_crews_that_wrote(home: Home) -> None:
    src, scan = source(home)
    assert fire(src, home, T0, full=True) is None
    assert scan.full == 1
    crew.append_status(home, "w7", "done: parser", now=T0 + 1)
    crew.mark_turn_ended(home, "w9")
    assert src.poll(ctx(home, T0 + 1.5, full=False)) is None  # (the quiet window)
    assert (scan.full, scan.only) == (1, [{"w7", "w9"}])
    wake = fire(src, home, T0 + 31, full=False)
    assert wake is not None and wake.reason == "signal: w7.status: done: parser (with w9)"
    assert scan.only[-1] == {"w7", "w9"}  # (left pending, looked at again)
    assert fire(src, home, T0 + 32, full=False) is None
    assert scan.only[-1] == {"w7", "w9"}  # (committed: looked at once more, found done)
    assert fire(src, home, T0 + 33, full=False) is None
    assert (scan.full, scan.only[-1]) == (1, set())


def test_a_line_written_by_hand_is_found_by_the_next_full_poll(home: Home) -> None:
    src, _ = source(home)
    assert fire(src, home, T0, full=True) is None
    with open(home.crew_dir / "w3.status", "a") as fh:
        fh.write(f"{T0:.3f}\tdone: by hand\n")
    assert fire(src, home, T0 + 40, full=False) is None
    wake = fire(src, home, T0 + 41, full=True)
    assert wake == Wake("signal", "w3.status", "signal: w3.status: done: by hand")


def test_a_new_watcher_starts_from_the_record_and_wakes_once(home: Home) -> None:
    first, _ = source(home)
    assert fire(first, home, T0, full=True) is None
    crew.append_status(home, "w5", "blocked: creds", now=T0 + 1)
    assert first.poll(ctx(home, T0 + 1.1, full=False)) is None  # held by the quiet window
    # The next watcher's first (full) poll, at once: from the record, not from every crew.
    second, scan = source(home)
    wake = second.poll(ctx(home, T0 + 2, full=True))
    assert wake == Wake("signal", "w5.status", "signal: w5.status: blocked: creds")
    assert (scan.full, scan.only) == (0, [{"w5"}])
    # It died before its row was durable: a third watcher raises the same wake again.
    third, _ = source(home)
    assert fire(third, home, T0 + 3, full=True) == wake
    fourth, scan = source(home)
    assert fire(fourth, home, T0 + 4, full=True) is None
    assert scan.full == 0


def test_a_new_watcher_looks_over_every_crew_when_the_last_full_pass_is_old(home: Home) -> None:
    src, _ = source(home)
    assert fire(src, home, T0, full=True) is None
    with open(home.crew_dir / "w3.status", "a") as fh:
        fh.write(f"{T0:.3f}\tdone: by hand\n")
    later, scan = source(home)
    wake = fire(later, home, T0 + 8, full=True)  # (half of FM_POLL's 15 s since the full pass)
    assert wake is not None and wake.key == "w3.status" and scan.full == 1


@pytest.mark.parametrize("damage", ["record missing", "record garbled", "journal removed",
                                    "journal replaced"])
def test_a_record_it_cannot_trust_means_a_full_pass(home: Home, damage: str) -> None:
    src, _ = source(home)
    crew.append_status(home, "w1", "working: a", now=T0)
    assert fire(src, home, T0 + 31, full=True) is not None
    with open(home.crew_dir / "w2.status", "a") as fh:
        fh.write(f"{T0:.3f}\tdone: by hand\n")
    record, journal = home.crew_dir / SEEN, home.crew_dir / CHANGES
    if damage == "record missing":
        record.unlink()
    elif damage == "record garbled":
        record.write_bytes(b"changes-seen 1 x\n")
    elif damage == "journal removed":
        journal.unlink()
    else:  # (by another file: a journal removed and written anew may get its inode back)
        (home.crew_dir / "other").write_text("w1\n")
        os.replace(home.crew_dir / "other", journal)
    wake = fire(src, home, T0 + 32, full=False)
    assert wake == Wake("signal", "w2.status", "signal: w2.status: done: by hand")


def test_a_long_journal_starts_anew_and_loses_no_name(home: Home) -> None:
    src, scan = source(home)
    journal = home.crew_dir / CHANGES
    journal.write_text("w0\n" * (ROTATE_BYTES // 3 + 1))
    assert fire(src, home, T0, full=True) is None
    assert not journal.exists() and (home.crew_dir / (CHANGES + OLD)).exists()
    crew.append_status(home, "w11", "done: after", now=T0 + 1)
    wake = fire(src, home, T0 + 40, full=False)
    assert wake is not None and wake.key == "w11.status"
    assert (scan.full, scan.only[0]) == (1, {"w11"})
    assert journal.stat().st_size < 100


def test_a_crew_removed_while_pending_is_dropped(home: Home) -> None:
    src, scan = source(home)
    assert fire(src, home, T0, full=True) is None
    crew.append_status(home, "w4", "done: x", now=T0 + 1)
    assert src.poll(ctx(home, T0 + 1.1, full=False)) is None
    crew.remove(home, "w4")
    assert fire(src, home, T0 + 40, full=False) is None
    assert fire(src, home, T0 + 41, full=False) is None
    assert scan.only[-1] == set()


def test_a_name_being_written_is_read_whole_next_time(home: Home) -> None:
    src, scan = source(home)
    assert fire(src, home, T0, full=True) is None
    crew.append_status(home, "w6", "done: y", now=T0 + 1)
    with open(home.crew_dir / CHANGES, "a") as fh:
        fh.write("w1")  # (a writer between its bytes: no newline yet)
    assert src.poll(ctx(home, T0 + 1.1, full=False)) is None
    assert scan.only[-1] == {"w6"}
    with open(home.crew_dir / CHANGES, "a") as fh:
        fh.write("2\n")
    assert src.poll(ctx(home, T0 + 1.2, full=False)) is None
    assert scan.only[-1] == {"w6", "w12"}


def test_hostile_names_in_the_journal_are_ignored(home: Home) -> None:
    src, _ = source(home)
    assert fire(src, home, T0, full=True) is None
    with open(home.crew_dir / CHANGES, "ab") as fh:
        fh.write(b"../../etc/passwd\n\xff\xfe\n" + b"x" * 5000 + b"\n.pane\n")
    crew.append_status(home, "w2", "done: z", now=T0 + 1)
    wake = fire(src, home, T0 + 40, full=False)
    assert wake is not None and wake.key == "w2.status"
    assert not os.path.exists(home.crew_dir / "..pane")
