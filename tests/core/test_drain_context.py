"""The status presentation printed after a drain's rows."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from firstmate.app.drain_context import DECISIONS_FOOTER, DECISIONS_HEADER, UNREAD_HEADER, present
from firstmate.store import crew
from firstmate.store.home import Home
from wakeq_support import NO_TMUX

CORE = str(Path(__file__).resolve().parents[2] / "core")
T0 = 1_700_000_000.0
LATEST = "wake annotation: latest wake-EVENT observed at drain, not current state: "
EARLIER = "wake annotation: unread wake-EVENT since last drain, not current state: "


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home").ensure()
    crew.add(h, "w1", "p1")
    crew.add(h, "w2", "p2")
    return h


def shown(home: Home, rows: list[tuple[str, str, str]] | None = None, **env: str) -> list[str]:
    out = io.StringIO()
    present(home, rows or [], out, env={"FM_TMUX_SOCKET": NO_TMUX, **env})
    return out.getvalue().splitlines()


def test_annotations_unread_status_and_open_decisions(home: Home) -> None:
    crew.append_status(home, "w1", "working: parsing", now=T0)
    crew.append_status(home, "w1", "blocked: no network", now=T0 + 1)
    crew.append_status(home, "w1", "done: parser", now=T0 + 2)
    crew.append_status(home, "w2", "needs-decision: key=db postgres or sqlite?", now=T0 + 3)
    crew.append_status(home, "w2", "working: meanwhile, docs", now=T0 + 4)
    rows = [("signal", "w1.status", "signal: w1.status: done: parser"), ("heartbeat", "heartbeat", "heartbeat")]
    assert shown(home, rows) == [
        f"{EARLIER}w1.status: blocked: no network",
        f"{LATEST}w1.status: done: parser",
        UNREAD_HEADER,
        "w1 working: parsing",
        "w2 needs-decision: key=db postgres or sqlite?",
        "w2 working: meanwhile, docs",
        DECISIONS_HEADER,
        "w2 [key=db] needs-decision: postgres or sqlite?",
        DECISIONS_FOOTER,
    ]
    assert DECISIONS_FOOTER.endswith('fm crew answer <crew> --key <key> "<answer>"')


def test_unread_lines_are_not_reprinted_but_open_decisions_are(home: Home) -> None:
    crew.append_status(home, "w2", "needs-decision: key=db which one?", now=T0)
    first = shown(home)
    assert UNREAD_HEADER in first and DECISIONS_HEADER in first
    second = shown(home)
    assert UNREAD_HEADER not in second
    assert second == [DECISIONS_HEADER, "w2 [key=db] needs-decision: which one?", DECISIONS_FOOTER]
    crew.answer(home, "w2", "db", "postgres")
    assert shown(home) == []  # the captain's answer is neither unread status nor open


def test_the_annotation_is_the_latest_line_at_drain_time(home: Home) -> None:
    crew.append_status(home, "w1", "done: first", now=T0)
    shown(home)  # an earlier drain read it
    crew.append_status(home, "w1", "working: next task", now=T0 + 5)
    lines = shown(home, [("signal", "w1.status", "signal: w1.status: done: first")])
    assert lines[0] == f"{LATEST}w1.status: working: next task"
    assert UNREAD_HEADER not in lines  # the only unread line is the annotated one


def test_turn_end_rows_are_marked_historical_and_skipped_beside_a_status_row(home: Home) -> None:
    crew.append_status(home, "w1", "working: a", now=T0)
    historical = "; historical / not necessarily the triggering event"
    lines = shown(home, [("signal", "w1.turn-ended", "signal: w1.turn-ended")])
    assert lines[0] == f"{LATEST}w1.status: working: a{historical}"
    lines = shown(home, [("signal", "w2.turn-ended", "signal: w2.turn-ended")])
    # (then the crew's screen: registered by a position never bound, so one line says so)
    assert lines == [f"{LATEST}w2.turn-ended: (no status line reported){historical}",
                     "SCREEN w2 (pane p2): not read: pane p2 is a position no pane is bound to "
                     "yet (fm crew list binds it)"]
    lines = shown(home, [("signal", "w1.turn-ended", "x"), ("signal", "w1.status", "y")])
    assert lines[0] == f"{LATEST}w1.status: working: a"
    assert len(lines) == 2 and lines[1].startswith("SCREEN w1 (pane p1): not read: ")


def test_rows_of_unknown_crews_and_other_kinds_are_not_annotated(home: Home) -> None:
    rows = [("signal", "ghost.status", "signal: ghost.status: done: x"), ("stale", "w1", "stale: w1"),
            ("check", "check:disk", "check: disk: full")]
    assert shown(home, rows) == []


def test_items_and_sections_are_byte_capped(home: Home) -> None:
    for i in range(40):
        crew.append_status(home, "w1", f"needs-decision: key=k{i:02d} " + "x" * 300, now=T0 + i)
    lines = shown(home)
    start = lines.index(DECISIONS_HEADER)
    items = lines[start + 1 : -2]
    assert all(len(item.encode()) <= 220 for item in items)
    assert sum(len(item.encode()) + 1 for item in items) <= 4000
    assert items[0].startswith("w1 [key=k00] needs-decision: xxx") and items[0].endswith("...")
    assert lines[-2] == f"OPEN DECISIONS: {40 - len(items)} more omitted (byte cap)"
    assert lines[-1] == DECISIONS_FOOTER
    # Unread status keeps the newest lines when it overflows.
    unread = lines[lines.index(UNREAD_HEADER) + 1 : start]
    assert unread[-1].startswith("UNREAD STATUS: ") and unread[-1].endswith(" more omitted (byte cap)")
    assert unread[-2].startswith("w1 needs-decision: key=k39")


HOLDER = """
import os, sys
from pathlib import Path
from firstmate.store.locks import FileLock
lock = FileLock(Path(sys.argv[1]), "holder", Path(sys.argv[2]))
lock.acquire(None)
print(os.getpid(), flush=True)
sys.stdin.read()
"""


def test_a_held_lock_skips_the_presentation_and_leaves_the_cursors(home: Home) -> None:
    crew.append_status(home, "w1", "done: x", now=T0)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(home.lock_path("status-presentation")),
                               str(home.root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": CORE})
    try:
        assert holder.stdout is not None
        pid = int(holder.stdout.readline())
        lines = shown(home, [("signal", "w1.status", "signal: w1.status: done: x")],
                      FM_STATUS_PRESENTATION_LOCK_TIMEOUT="1")
        assert lines == [f"STATUS PRESENTATION SKIPPED: lock remains held by live pid {pid} after 1s; "
                         "retry on the next drain."]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(20)
    # Nothing advanced: the next drain presents the same unread line.
    assert not (home.crew_dir / "w1.drain-cursor").exists()
    assert shown(home) == [UNREAD_HEADER, "w1 done: x"]


def test_cursors_stay_when_the_output_cannot_be_written(home: Home) -> None:
    crew.append_status(home, "w1", "done: x", now=T0)

    class Broken(io.StringIO):
        def flush(self) -> None:
            raise BrokenPipeError

    with pytest.raises(BrokenPipeError):
        present(home, [], Broken(), env={})
    assert not (home.crew_dir / "w1.drain-cursor").exists()
    assert shown(home) == [UNREAD_HEADER, "w1 done: x"]


def test_a_removed_and_readded_crew_starts_unread_again(home: Home) -> None:
    crew.append_status(home, "w1", "done: old", now=T0)
    shown(home)
    crew.remove(home, "w1")
    crew.add(home, "w1", "p1")
    crew.append_status(home, "w1", "done: new", now=T0 + 1)
    assert shown(home) == [UNREAD_HEADER, "w1 done: new"]


def test_hand_written_hostile_lines_are_cleaned(home: Home) -> None:
    with open(home.crew_dir / "w1.status", "a") as fh:
        fh.write("needs-decision: key=x \x1b]0;title\x07pick\x1b[2J one\n")
    lines = shown(home)
    assert "w1 [key=x] needs-decision: pick one" in lines
    assert all("\x1b" not in line for line in lines)


def test_prepare_then_commit_or_abandon(home: Home) -> None:
    from firstmate.app.drain_context import prepare

    crew.append_status(home, "w1", "done: x", now=T0)
    abandoned = prepare(home, [], env={})
    assert abandoned.lines == [UNREAD_HEADER, "w1 done: x"]
    abandoned.abandon()
    kept = prepare(home, [], env={})  # the lock was released; nothing advanced
    assert kept.lines == [UNREAD_HEADER, "w1 done: x"]
    kept.commit()
    after = prepare(home, [], env={})
    assert after.lines == []
    after.commit()


def test_a_screen_reader_that_fails_never_fails_the_presentation(home: Home) -> None:
    def broken(_home: Home, _env: object, names: object) -> list[tuple[str, str, str | None, str | None]]:
        raise RuntimeError("tmux exploded")

    out = io.StringIO()
    present(home, [("signal", "w1.turn-ended", "signal: w1.turn-ended")], out, env={},
            reader=broken)
    assert out.getvalue().splitlines()[-1] == "SCREEN w1 (pane ?): not read: RuntimeError: tmux exploded"
    assert (home.crew_dir / "w1.drain-cursor").exists() is False  # nothing unread to mark


def test_the_screens_read_are_the_registered_crews_turn_ends_in_row_order(home: Home) -> None:
    asked: list[list[str]] = []

    def reader(_home: Home, _env: object, names: list[str]) -> list[tuple[str, str, str | None, str | None]]:
        asked.append(list(names))
        return [(name, "%9", f"{name} screen\n\n", None) for name in names]

    out = io.StringIO()
    present(home, [("signal", "w2.turn-ended", "x"), ("signal", "ghost.turn-ended", "x"),
                   ("stale", "w1.turn-ended", "x"), ("signal", "w1.turn-ended", "x"),
                   ("signal", "w2.turn-ended", "again")], out, env={}, reader=reader)
    assert asked == [["w2", "w1"]]
    screens = [line for line in out.getvalue().splitlines() if "screen" in line or "SCREEN" in line]
    assert screens == [
        "SCREEN w2 (pane %9), its last non-blank line now (the turn ended before):",
        "  | w2 screen",
        "SCREEN w1 (pane %9), its last non-blank line now (the turn ended before):",
        "  | w1 screen"]
