"""The status source: captain-relevant verbs, working evidence, turn ends, grace coalescing.

Time is passed explicitly (``now``); the crew backend is the harness boundary, so a small
stand-in with a settable busy verdict plays the pane.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import attrs
import pytest
from firstmate.store import crew
from firstmate.store.home import Home
from firstmate.watch.sources.base import PollContext, Source, Wake
from firstmate.watch.sources.status import StatusSource

#: Well in the past, so a turn-end marker's real mtime is always newer than the test's lines.
T0 = float(int(time.time())) - 100_000


@attrs.define
class Panes:
    """A crew backend stand-in: panes named in ``busy_panes`` are mid-turn."""

    busy_panes: set[str] = attrs.Factory(set)
    name: str = "fake"
    last_error: str | None = None

    def capture(self, target: str) -> str | None:
        return f"pane {target}"

    def busy(self, target: str) -> bool:
        return target in self.busy_panes


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home").ensure()
    crew.add(h, "w1", "p1")
    crew.add(h, "w2", "p2")
    return h


def ctx(home: Home, now: float, triage: list[str] | None = None, **env: str) -> PollContext:
    log = triage if triage is not None else []
    return PollContext(home=home, env={"FM_SIGNAL_GRACE": "30", **env}, now=now, poll=1,
                       triage=log.append)


def fire(source: StatusSource, home: Home, now: float, **env: str) -> Wake | None:
    """Poll; when a wake comes back, commit it as the watcher would after appending its row."""
    c = ctx(home, now, None, **env)
    wake = source.poll(c)
    if wake is not None:
        source.commit(wake, c)
    return wake


def test_it_is_a_source() -> None:
    assert isinstance(StatusSource(Home(Path("/nonexistent"))), Source)


def test_captain_line_is_held_for_the_quiet_window_then_wakes(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1", "p2"}))
    crew.append_status(home, "w1", "done: tests pass", now=T0)
    assert source.poll(ctx(home, T0 + 1)) is None
    assert source.next_due(ctx(home, T0 + 1)) == pytest.approx(T0 + 2)
    wake = source.poll(ctx(home, T0 + 2))
    assert wake == Wake("signal", "w1.status", "signal: w1.status: done: tests pass")
    source.commit(wake, ctx(home, T0 + 2))
    assert source.poll(ctx(home, T0 + 3)) is None
    assert source.next_due(ctx(home, T0 + 3)) is None


@pytest.mark.parametrize("line", ["needs-decision: key=k merge?", "blocked: need creds",
                                  "failed: build broke"])
def test_someone_waiting_wakes_after_the_short_quiet_window(home: Home, line: str) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1"}))
    crew.append_status(home, "w1", line, now=T0)
    assert source.poll(ctx(home, T0 + 0.1)) is None
    assert source.next_due(ctx(home, T0 + 0.1)) == pytest.approx(T0 + 0.25)
    wake = fire(source, home, T0 + 0.25)
    assert wake is not None and wake.reason == f"signal: w1.status: {line}"


def test_the_quiet_windows_are_configurable(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1"}))
    crew.append_status(home, "w1", "done: x", now=T0)
    assert source.poll(ctx(home, T0 + 3, FM_SIGNAL_QUIET="5")) is None
    assert fire(source, home, T0 + 5, FM_SIGNAL_QUIET="5") is not None


def test_chatter_that_never_quiets_still_wakes_within_the_grace(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1"}))
    for second in range(0, 30):
        crew.append_status(home, "w1", f"done: step {second}", now=T0 + second)
        assert fire(source, home, T0 + second + 0.5) is None
    wake = fire(source, home, T0 + 30)
    assert wake is not None and wake.reason == "signal: w1.status: done: step 29"


def test_grace_zero_turns_coalescing_off(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1"}))
    crew.append_status(home, "w1", "blocked: need creds", now=T0)
    wake = fire(source, home, T0, FM_SIGNAL_GRACE="0")
    assert wake is not None and wake.reason == "signal: w1.status: blocked: need creds"


def test_a_newer_line_restarts_the_quiet_window_and_the_newest_wins(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1"}))
    crew.append_status(home, "w1", "done: part one", now=T0)
    assert source.poll(ctx(home, T0 + 1)) is None
    crew.append_status(home, "w1", "done: part two", now=T0 + 1.5)
    assert source.poll(ctx(home, T0 + 3)) is None
    assert source.next_due(ctx(home, T0 + 3)) == pytest.approx(T0 + 3.5)
    wake = fire(source, home, T0 + 3.5)
    assert wake is not None and wake.reason == "signal: w1.status: done: part two"
    # One wake covered the burst: nothing is left over.
    assert fire(source, home, T0 + 200) is None


def test_the_newest_captain_line_wins_over_later_chatter(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1"}))
    crew.append_status(home, "w1", "failed: build broke", now=T0)
    crew.append_status(home, "w1", "working: looking into it", now=T0 + 1)
    wake = fire(source, home, T0 + 40)
    assert wake is not None and wake.reason == "signal: w1.status: failed: build broke"


def test_old_lines_found_after_downtime_wake_without_waiting(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1"}))
    crew.append_status(home, "w1", "needs-decision: key=k merge?", now=T0 - 3600)
    wake = fire(source, home, T0)
    assert wake is not None and wake.key == "w1.status"


def test_chatter_from_a_working_crew_is_absorbed_into_triage(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1"}))
    crew.append_status(home, "w1", "working: reading the code", now=T0)
    triage: list[str] = []
    assert source.poll(ctx(home, T0 + 100, triage)) is None
    assert triage == ["absorbed signal: w1.status: working: reading the code (crew busy)"]
    # Absorbed means the cursor moved: it is not seen again.
    assert fire(source, home, T0 + 200) is None


def test_chatter_from_an_idle_crew_is_actionable(home: Home) -> None:
    panes = Panes()
    source = StatusSource(home, panes)
    crew.append_status(home, "w1", "working: thinking about it", now=T0)
    assert source.poll(ctx(home, T0 + 1)) is None  # held for the quiet window
    wake = fire(source, home, T0 + 31)
    assert wake is not None and wake.reason == "signal: w1.status: working: thinking about it"


def test_no_backend_means_no_evidence_of_working(home: Home) -> None:
    crew.append_status(home, "w1", "progress: 3 of 5", now=T0)
    wake = fire(StatusSource(home, None), home, T0 + 31)
    assert wake is not None and wake.key == "w1.status"


def test_a_crew_that_resumed_work_during_the_grace_is_absorbed(home: Home) -> None:
    panes = Panes()
    source = StatusSource(home, panes)
    crew.append_status(home, "w1", "working: step done, next step", now=T0)
    assert source.poll(ctx(home, T0 + 1)) is None
    panes.busy_panes.add("p1")
    assert fire(source, home, T0 + 31) is None


def test_an_uncommitted_wake_is_raised_again(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1"}))
    crew.append_status(home, "w1", "done: x", now=T0)
    first = source.poll(ctx(home, T0 + 31))
    assert first is not None
    # The watcher crashed before appending the row: no commit, so a new watcher sees it again.
    again = StatusSource(home, Panes(busy_panes={"p1"})).poll(ctx(home, T0 + 40))
    assert again == first


def test_turn_end_of_an_idle_crew_wakes(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p2"}))
    crew.mark_turn_ended(home, "w1")
    now = time.time()
    assert source.poll(ctx(home, now)) is None  # the marker's own time starts the quiet window
    wake = fire(source, home, now + 31)
    assert wake == Wake("signal", "w1.turn-ended", "signal: w1.turn-ended")
    assert fire(source, home, now + 100) is None
    # A bare `touch` from a harness hook counts as a new turn end too.
    marker = home.crew_dir / "w1.turn-ended"
    os.utime(marker, (now + 200, now + 200))
    wake = fire(source, home, now + 231)
    assert wake is not None and wake.key == "w1.turn-ended"


def test_turn_end_of_a_busy_crew_is_absorbed(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1"}))
    crew.mark_turn_ended(home, "w1")
    triage: list[str] = []
    assert source.poll(ctx(home, time.time() + 60, triage)) is None
    assert triage == ["absorbed signal: w1.turn-ended (crew busy)"]
    assert fire(source, home, time.time() + 120) is None


def test_a_status_wake_covers_the_turn_end_seen_with_it(home: Home) -> None:
    source = StatusSource(home, Panes())
    crew.append_status(home, "w1", "done: all green", now=T0)
    crew.mark_turn_ended(home, "w1")
    later = time.time() + 60
    wake = fire(source, home, later)
    assert wake is not None and wake.key == "w1.status"
    assert fire(source, home, later + 60) is None


def test_captain_regex_is_configurable(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1"}))
    crew.append_status(home, "w1", "done: not relevant under this regex", now=T0)
    triage: list[str] = []
    assert source.poll(ctx(home, T0 + 40, triage, FM_CAPTAIN_RE=r"^shipped:")) is None
    assert triage and triage[0].startswith("absorbed signal: w1.status: done:")
    crew.append_status(home, "w1", "Shipped: v1.2", now=T0 + 50)
    wake = fire(source, home, T0 + 90, FM_CAPTAIN_RE=r"^shipped:")
    assert wake is not None and wake.reason == "signal: w1.status: Shipped: v1.2"


@pytest.mark.parametrize("line", ["PR ready: #12", "checks green on main", "ready in branch fm/x",
                                  "merged #12", "Done: x", "needs-decision: y"])
def test_default_captain_verbs(home: Home, line: str) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1"}))
    crew.append_status(home, "w1", line, now=T0)
    wake = fire(source, home, T0 + 31)
    assert wake is not None and wake.reason == f"signal: w1.status: {line}"


def test_an_invalid_captain_regex_falls_back_to_the_default_once_noted(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1"}))
    crew.append_status(home, "w1", "done: x", now=T0)
    triage: list[str] = []
    wake = source.poll(ctx(home, T0 + 31, triage, FM_CAPTAIN_RE="(unclosed"))
    assert wake is not None and wake.key == "w1.status"
    source.poll(ctx(home, T0 + 32, triage, FM_CAPTAIN_RE="(unclosed"))
    assert triage.count("status: FM_CAPTAIN_RE is not a valid regex; using the default") == 1


def test_the_captains_answers_are_not_crew_events(home: Home) -> None:
    source = StatusSource(home, Panes())
    crew.append_status(home, "w1", "needs-decision: key=k go?", now=T0)
    assert fire(source, home, T0 + 31) is not None
    crew.answer(home, "w1", "k", "yes", now=T0 + 40)
    assert fire(source, home, T0 + 100) is None


def test_one_wake_covers_every_crew_pending_at_once(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1", "p2"}))
    crew.append_status(home, "w2", "blocked: early", now=T0)
    crew.append_status(home, "w1", "blocked: later", now=T0 + 0.1)
    first = fire(source, home, T0 + 60)
    assert first is not None and first.key == "w2.status"
    assert first.reason == "signal: w2.status: blocked: early (with w1)"
    # Both crews' cursors advanced with the one commit: nothing is left to wake for.
    assert fire(source, home, T0 + 61) is None


def test_the_most_urgent_crew_names_the_wake(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1", "p2"}))
    crew.append_status(home, "w1", "done: shipped", now=T0)
    crew.append_status(home, "w2", "needs-decision: key=k which?", now=T0 + 1)
    # The urgent line shortens the whole fleet's quiet window.
    wake = fire(source, home, T0 + 1.25)
    assert wake is not None and wake.key == "w2.status"
    assert wake.reason.endswith("(with w1)")


def test_a_burst_from_five_crews_within_two_seconds_is_one_wake(home: Home) -> None:
    for name in ("w3", "w4", "w5"):
        crew.add(home, name, "p-" + name)
    source = StatusSource(home, Panes(busy_panes={"p1", "p2", "p-w3", "p-w4", "p-w5"}))
    for i, name in enumerate(("w1", "w2", "w3", "w4", "w5")):
        crew.append_status(home, name, f"done: {name} finished", now=T0 + i * 0.45)
        assert fire(source, home, T0 + i * 0.45 + 0.05) is None
    wake = fire(source, home, T0 + 4 * 0.45 + 2)
    assert wake is not None and wake.reason == (
        "signal: w1.status: done: w1 finished (with w2, w3, w4, w5)")
    assert fire(source, home, T0 + 60) is None


def test_control_characters_never_reach_the_reason_line(home: Home) -> None:
    with open(home.crew_dir / "w1.status", "a") as fh:
        fh.write("done: \x1b[2Jwiped\x07 \u0085x\n")
    source = StatusSource(home, Panes())
    # A line without a stamp is held for the grace from when the watcher first saw it.
    assert fire(source, home, T0) is None
    wake = fire(source, home, T0 + 30)
    assert wake is not None and wake.reason == "signal: w1.status: done: wiped  x"


def test_a_symlinked_status_log_is_skipped_with_a_note_not_a_crash(home: Home, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_text("1.0\tdone: forged\n")
    (home.crew_dir / "w1.status").symlink_to(tmp_path / "elsewhere")
    crew.append_status(home, "w2", "done: real", now=T0)
    triage: list[str] = []
    wake = StatusSource(home, Panes()).poll(ctx(home, T0 + 31, triage))
    assert wake is not None and wake.key == "w2.status"
    assert any("w1: skipped" in line and "symlink" in line for line in triage)


def test_a_status_log_or_cursor_that_is_a_fifo_is_skipped_without_waiting(home: Home) -> None:
    # Opened without blocking and refused as not a regular file: the poll never waits for a
    # writer that will not come.
    crew.add(home, "w3", "p3")
    (home.crew_dir / "w1.status").unlink(missing_ok=True)
    os.mkfifo(home.crew_dir / "w1.status")
    crew.append_status(home, "w2", "done: real", now=T0)
    os.mkfifo(home.crew_dir / "w2.signal-cursor")
    crew.append_status(home, "w3", "done: also real", now=T0)
    triage: list[str] = []
    wake = StatusSource(home, Panes()).poll(ctx(home, T0 + 31, triage))
    assert wake is not None and wake.key == "w3.status"
    assert any("w1: skipped" in line and "not a regular file" in line for line in triage)
    assert any("w2: skipped" in line and "not a regular file" in line for line in triage)


def test_marks_rewritten_under_the_source_are_read_again(home: Home) -> None:
    # The source keeps each crew's cursor and turn-seen mark from its last read and answers an
    # unchanged crew from one directory scan: a mark rewritten under it is read again.
    source = StatusSource(home, Panes())
    crew.append_status(home, "w1", "done: parser", now=T0)
    assert fire(source, home, T0 + 31) == Wake("signal", "w1.status", "signal: w1.status: done: parser")
    assert fire(source, home, T0 + 40) is None
    cursor = home.crew_dir / "w1.signal-cursor"
    stored = crew.read_cursor(cursor)
    assert stored is not None and stored.offset > 0
    crew.write_cursor(cursor, crew.Cursor(stored.inode, 0))
    assert fire(source, home, T0 + 50) == Wake("signal", "w1.status", "signal: w1.status: done: parser")
    assert fire(source, home, T0 + 60) is None

    crew.mark_turn_ended(home, "w2")
    now = time.time() + 100
    assert fire(source, home, now) == Wake("signal", "w2.turn-ended", "signal: w2.turn-ended")
    assert fire(source, home, now + 1) is None
    (home.crew_dir / "w2.turn-seen").write_text("0 0 0\n")
    assert fire(source, home, now + 2) == Wake("signal", "w2.turn-ended", "signal: w2.turn-ended")


def test_a_line_appended_after_a_quiet_poll_is_seen(home: Home) -> None:
    source = StatusSource(home, Panes())
    crew.append_status(home, "w1", "done: one", now=T0)
    assert fire(source, home, T0 + 31) is not None
    assert fire(source, home, T0 + 32) is None
    crew.append_status(home, "w1", "done: two", now=T0 + 40)
    assert fire(source, home, T0 + 71) == Wake("signal", "w1.status", "signal: w1.status: done: two")


def test_a_turn_end_recorded_before_the_pane_redrew_is_looked_at_again(home: Home) -> None:
    panes = Panes(busy_panes={"p1"})
    source = StatusSource(home, panes)
    crew.mark_turn_ended(home, "w1")
    marked = (home.crew_dir / "w1.turn-ended").stat().st_mtime
    triage: list[str] = []
    # Still inside the settle window: held, not absorbed, and due again when it ends.
    assert source.poll(ctx(home, marked + 0.5, triage, FM_SIGNAL_GRACE="0")) is None
    assert triage == []
    assert source.next_due(ctx(home, marked + 0.5)) == pytest.approx(marked + 3.0)
    # The harness redrew its idle screen: the turn end wakes.
    panes.busy_panes.clear()
    wake = fire(source, home, marked + 3.0, FM_SIGNAL_GRACE="0")
    assert wake == Wake("signal", "w1.turn-ended", "signal: w1.turn-ended")
    # A turn end whose pane is still busy when the window ends is absorbed.
    crew.mark_turn_ended(home, "w1")
    panes.busy_panes.add("p1")
    again = (home.crew_dir / "w1.turn-ended").stat().st_mtime
    assert source.poll(ctx(home, again + 0.1, triage, FM_SIGNAL_GRACE="0")) is None and not triage
    assert source.poll(ctx(home, again + 3.0, triage, FM_SIGNAL_GRACE="0")) is None
    assert triage == ["absorbed signal: w1.turn-ended (crew busy)"]
    # FM_TURN_SETTLE=0 absorbs at once.
    crew.mark_turn_ended(home, "w1")
    latest = (home.crew_dir / "w1.turn-ended").stat().st_mtime
    assert source.poll(ctx(home, latest, triage, FM_TURN_SETTLE="0")) is None
    assert len(triage) == 2


def test_a_status_line_over_the_read_limit_is_read_past_and_reported_once(home: Home) -> None:
    """A broken reporter (or ``cat`` of a binary) writes one line of 2 MiB: the source keeps
    its beginning, says so once in the triage log, and the crew's later lines still wake."""
    source = StatusSource(home, Panes())
    with open(home.crew_dir / "w1.status", "ab") as fh:
        fh.write(b"\xff\xfe" + os.urandom(16).hex().encode() * (1 << 16) + b"\n")
    triage: list[str] = []
    for poll in range(3):
        c = ctx(home, T0 + 40 * poll, triage)
        wake = source.poll(c)
        if wake is not None:
            source.commit(wake, c)
    notes = [line for line in triage if "status line of" in line]
    assert len(notes) == 1 and "w1.status was cut to its first 65536 bytes" in notes[0], triage
    crew.append_status(home, "w1", "done: second report", now=T0 + 200)
    wake = fire(source, home, T0 + 231)
    assert wake is not None and wake.reason == "signal: w1.status: done: second report"
    assert fire(source, home, T0 + 300) is None


def test_an_oversized_line_between_reports_does_not_hide_the_report_after_it(home: Home) -> None:
    crew.append_status(home, "w1", "working: start", now=T0)
    with open(home.crew_dir / "w1.status", "ab") as fh:
        fh.write(b"x" * (3 << 20) + b"\n")
    crew.append_status(home, "w1", "done: after the blob", now=T0 + 1)
    # (at most 1 MiB is read per poll: the first cycle closes on what came before the blob)
    first = fire(StatusSource(home, Panes()), home, T0 + 31)
    assert first is not None and first.reason == "signal: w1.status: working: start"
    wake = fire(StatusSource(home, Panes()), home, T0 + 62)
    assert wake is not None and wake.reason == "signal: w1.status: done: after the blob"


# --- what a drain presented wakes no one again -------------------------------------------------


def present(home: Home) -> list[str]:
    """What ``fm wake drain`` prints of the crews, with its mark committed as the drain does."""
    from firstmate.app import drain_context

    presentation = drain_context.prepare(home, [], env={})
    presentation.commit()
    return presentation.lines


def test_lines_a_drain_presented_do_not_wake_and_a_later_line_does(home: Home) -> None:
    crew.append_status(home, "w1", "done: second report", now=T0)
    crew.append_status(home, "w2", "needs-decision: key=x choose A or B", now=T0)
    shown = present(home)
    assert "w1 done: second report" in shown and "w2 needs-decision: key=x choose A or B" in shown
    source = StatusSource(home, Panes())
    assert fire(source, home, T0 + 100) is None
    # The source's own cursor caught up with the mark: the crew reads as unchanged again.
    assert crew.read_cursor(home.crew_dir / "w1.signal-cursor") is not None
    crew.append_status(home, "w1", "done: third", now=T0 + 200)
    wake = fire(source, home, T0 + 300)
    assert wake is not None and wake.reason == "signal: w1.status: done: third"


def test_a_mark_of_another_log_is_not_honoured(home: Home) -> None:
    crew.append_status(home, "w1", "done: before", now=T0)
    present(home)
    log = home.crew_dir / "w1.status"
    text = log.read_bytes()
    log.unlink()
    log.write_bytes(text + b"1.0\tdone: in a new log\n")  # another inode, the old mark's offset
    wake = fire(StatusSource(home, Panes()), home, T0 + 100)
    assert wake is not None and wake.reason == "signal: w1.status: done: in a new log"


def test_the_source_never_goes_back_behind_its_own_cursor(home: Home) -> None:
    source = StatusSource(home, Panes())
    crew.append_status(home, "w1", "done: one", now=T0)
    present(home)  # the mark: after "done: one"
    crew.append_status(home, "w1", "done: two", now=T0 + 1)
    wake = fire(source, home, T0 + 100)
    assert wake is not None and wake.reason == "signal: w1.status: done: two"
    assert fire(source, home, T0 + 200) is None  # its cursor (past "two") wins over the mark


def test_a_decision_the_captain_answered_does_not_wake(home: Home) -> None:
    crew.append_status(home, "w1", "needs-decision: key=x choose A or B", now=T0)
    crew.answer(home, "w1", "x", "A", now=T0 + 1)
    crew.append_status(home, "w2", "needs-decision: which way?", now=T0)  # keyless: line1
    crew.answer(home, "w2", "line1", "left", now=T0 + 1)
    assert fire(StatusSource(home, Panes()), home, T0 + 100) is None


def test_an_answered_decision_leaves_the_crews_other_news_to_wake(home: Home) -> None:
    crew.append_status(home, "w1", "needs-decision: key=x A or B?", now=T0)
    crew.append_status(home, "w1", "needs-decision: key=y C or D?", now=T0 + 1)
    crew.answer(home, "w1", "x", "A", now=T0 + 2)
    wake = fire(StatusSource(home, Panes()), home, T0 + 100)
    assert wake is not None and wake.reason == "signal: w1.status: needs-decision: key=y C or D?"


def test_a_turn_end_shown_with_the_lines_is_seen_and_a_later_one_wakes(home: Home) -> None:
    crew.append_status(home, "w1", "done: the parser", now=T0)
    crew.mark_turn_ended(home, "w1")
    present(home)
    source = StatusSource(home, Panes())
    now = time.time()
    assert fire(source, home, now + 100) is None
    marker = home.crew_dir / "w1.turn-ended"
    os.utime(marker, (now + 200, now + 200))  # the crew's next turn ends
    wake = fire(source, home, now + 300)
    assert wake == Wake("signal", "w1.turn-ended", "signal: w1.turn-ended")


def test_a_turn_end_no_line_was_shown_with_still_wakes(home: Home) -> None:
    crew.append_status(home, "w1", "done: the parser", now=T0)
    present(home)  # shows the line; no turn end yet
    crew.mark_turn_ended(home, "w1")  # the crew then goes idle without a word
    present(home)  # nothing new of the crew's own to show: its turn end is not covered
    wake = fire(StatusSource(home, Panes()), home, time.time() + 100)
    assert wake == Wake("signal", "w1.turn-ended", "signal: w1.turn-ended")


def test_a_drain_showing_nothing_new_keeps_the_turn_end_it_covered(home: Home) -> None:
    crew.append_status(home, "w1", "done: the parser", now=T0)
    crew.mark_turn_ended(home, "w1")
    present(home)
    present(home)  # a second drain, nothing new: the covered turn end stays covered
    assert fire(StatusSource(home, Panes()), home, time.time() + 100) is None


def test_a_mark_past_the_end_of_the_log_is_not_honoured(home: Home) -> None:
    source = StatusSource(home, Panes(busy_panes={"p1"}))
    crew.append_status(home, "w1", "done: one", now=T0)
    assert fire(source, home, T0 + 100) is not None
    log = home.crew_dir / "w1.status"
    (home.crew_dir / "w1.drain-cursor").write_text(f"{log.stat().st_ino} 99999999\n")
    crew.append_status(home, "w1", "working: two", now=T0 + 200)
    # Chatter of a busy crew: absorbed; "done: one" is not read again from byte 0.
    assert fire(source, home, T0 + 300) is None
