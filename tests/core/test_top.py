"""``fm top``: frames gathered from a real home (real SQLite, crews through the store API),
rendered to a width and height, ``--once``, and the plain mode following a home's changes."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from firstmate.app.top import Frame, Gatherer
from firstmate.app.top_view import START_HINT, render, width_of
from firstmate.base.errors import StateError
from firstmate.store import crew, deliveries, drain, queue
from firstmate.store.home import Home
from firstmate.testing.procs import DEADLINE, SpawnedArm, fm_command
from wakeq_support import db_for

ESC = "\x1b"


@pytest.fixture
def top(fm_home: Home) -> Iterator[Gatherer]:
    # (no tmux to ask: crews' panes show as registered, with no state)
    g = Gatherer(fm_home.root, {"FM_HOME": str(fm_home.root), "FM_TMUX": "/nonexistent/tmux"})
    try:
        yield g
    finally:
        g.close()


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --- gathering -------------------------------------------------------------------------------


def test_a_missing_home_is_an_empty_panel_that_says_how_to_start(tmp_path: Path) -> None:
    root = tmp_path / "nowhere"
    g = Gatherer(root, {})
    frame = g.gather()
    g.close()
    assert not frame.exists and frame.crews == () and frame.wakes == ()
    lines = render(frame, 100)
    assert lines[0].startswith("fm top ") and str(root) in lines[0]
    assert lines[1:] == list(START_HINT)
    assert not root.exists()  # a viewer never creates a home


def test_a_fresh_home_is_read_without_creating_anything(fm_home: Home, top: Gatherer) -> None:
    before = tree(fm_home.root)
    frame = top.gather()
    assert frame.exists and frame.depth == 0 and frame.oldest_seq is None
    assert frame.watcher.state == "none" and frame.episode is None and not frame.away
    assert tree(fm_home.root) == before  # no database, no crew directory, no lock file


def test_crews_show_their_pane_last_own_line_and_turn_end(fm_home: Home, top: Gatherer) -> None:
    crew.add(fm_home, "alpha", "fleet:0.1")
    crew.add(fm_home, "beta", "%12")
    crew.append_status(fm_home, "alpha", "working: parsing", now=1000.0)
    crew.append_status(fm_home, "alpha", "needs-decision: key=db which database?", now=1010.0)
    crew.answer(fm_home, "alpha", "db", "sqlite", now=1020.0)  # the captain's, not the crew's
    crew.mark_turn_ended(fm_home, "alpha", now=1015.0)
    frame = top.gather(now=1030.0)
    alpha, beta = frame.crews
    assert (alpha.name, alpha.pane, beta.name, beta.pane) == ("alpha", "fleet:0.1", "beta", "%12")
    assert alpha.status == "needs-decision: key=db which database?" and alpha.status_at == 1010.0
    assert alpha.turn_ended_at is not None  # the marker's time (mtime: the file was written now)
    assert beta.status == "" and beta.status_at is None and beta.turn_ended_at is None
    assert alpha.decisions == () and alpha.harness is None
    text = "\n".join(render(frame, 120))
    assert "crew   harness  pane       state    dec  turn end     age  last status" in text
    assert "alpha  -        fleet:0.1  unknown  " in text  # (tmux could not be asked)
    assert "     20s  needs-decision: key=db which database?" in text


def test_crews_show_their_harness_and_open_decisions(fm_home: Home, top: Gatherer) -> None:
    crew.add(fm_home, "alpha", "%3")
    crew.set_harness(fm_home, "alpha", "pi")
    crew.append_status(fm_home, "alpha", "needs-decision: key=db which database?", now=1000.0)
    crew.append_status(fm_home, "alpha", "needs-decision: key=ci rerun it?", now=1001.0)
    frame = top.gather(now=1010.0)
    (alpha,) = frame.crews
    assert (alpha.harness, alpha.decisions) == ("pi", ("db", "ci"))
    assert any(line.split()[:5] == ["alpha", "pi", "%3", "unknown", "!2"]
               for line in render(frame, 120))
    crew.answer(fm_home, "alpha", "db", "sqlite")
    (alpha,) = top.gather(now=1010.0).crews  # (its log changed: read again)
    assert alpha.decisions == ("ci",)


def test_queue_episode_and_away_are_shown(fm_home: Home, top: Gatherer) -> None:
    db = db_for(fm_home)
    first = queue.append(db, "check", "ci", "ci failed on main", at=2000.0)
    queue.append(db, "check", "ci2", "lint failed", at=2005.0)
    db.close()
    fm_home.away_record.write_text("{}")
    frame = top.gather(now=2065.0)
    assert (frame.depth, frame.oldest_seq, frame.oldest_at) == (2, first, 2000.0)
    assert frame.episode is not None and frame.episode.startswith("pending:downtime:")
    assert frame.away
    text = "\n".join(render(frame, 100))
    assert f"queue    2 rows  oldest #{first}, 1m05s old" in text
    assert "away     on" in text and f"episode  {frame.episode}" in text


def test_a_wake_shows_its_append_and_event_latency(fm_home: Home, top: Gatherer) -> None:
    db = db_for(fm_home)
    crew.add(fm_home, "alpha", "fleet:0.1")
    now = time.time()
    stamp = crew.append_status(fm_home, "alpha", "done: tests pass", now=now - 3.0).at
    queue.append(db, "check", "ci", "ci failed", at=now - 7.0)
    queue.append(db, "signal", "alpha.status", "signal: alpha.status: done: tests pass",
                 at=now - 0.5)
    deliveries.record(db, 4242, "4242:1.00:aa", "check: ci failed")
    deliveries.record(db, 4243, "4243:1.00:bb", "signal: alpha.status: done: tests pass")
    deliveries.record(db, 4244, "4244:1.00:cc", "stale: beta pane unchanged")
    db.close()
    frame = top.gather()
    stale, signal_wake, check = frame.wakes  # newest first
    assert stale.reason == "stale: beta pane unchanged"
    assert stale.append_latency is None and stale.event_latency is None  # no row, no stamp
    assert check.event_latency is None
    assert check.append_latency is not None and 7.0 <= check.append_latency < 7.0 + DEADLINE
    assert signal_wake.append_latency is not None and signal_wake.append_latency >= 0.5
    assert signal_wake.event_latency is not None
    assert signal_wake.event_latency == pytest.approx(signal_wake.at - stamp)
    text = "\n".join(render(frame, 120))
    assert "last wakes (3)" in text and "signal: alpha.status: done: tests pass" in text


def test_a_turn_end_marker_of_minus_infinity_leaves_fm_top_standing(fm_home: Home) -> None:
    """A delivered turn-end wake whose marker now says ``-inf``: the event latency is unknown."""
    crew.add(fm_home, "a", "%1")
    crew.mark_turn_ended(fm_home, "a")
    db = db_for(fm_home)
    deliveries.record(db, 4242, "4242:1.00:aa", "signal: a.turn-ended")
    db.close()
    for content in (b"-inf\n", b"nan\n", b"1e400\n", b"-1e400 5\n"):
        Path(crew.path(fm_home, "a", crew.TURN_ENDED)).write_bytes(content)
        gatherer = Gatherer(fm_home.root, {"FM_HOME": str(fm_home.root)})
        try:
            frame = gatherer.gather(now=time.time() + 10)
        finally:
            gatherer.close()
        (wake,) = frame.wakes
        # (a stamp that is not a finite number is no stamp; 5 is one, if an odd one)
        assert wake.event_latency is None or 0 <= wake.event_latency < float("inf")
        assert "signal: a.turn-ended" in "\n".join(render(frame, 120))


def test_figures_that_are_not_finite_numbers_read_as_unknown() -> None:
    from firstmate.app.top_view import age, latency

    for value in (float("inf"), float("-inf"), float("nan")):
        assert age(value) == "-" and latency(value) == "-"


def test_a_row_seen_before_its_acknowledgement_keeps_its_latency(fm_home: Home) -> None:
    db = db_for(fm_home)
    queue.append(db, "check", "ci", "ci failed", at=time.time() - 4.0)
    seen = Gatherer(fm_home.root, {})
    late = Gatherer(fm_home.root, {})
    try:
        seen.gather()  # this viewer was running when the row was queued
        deliveries.record(db, 77, "77:1.00:aa", "check: ci failed")
        presented = drain.drain(db, "main")
        assert presented.ack_through is not None and presented.generation is not None
        drain.acknowledge(db, "main", presented.ack_through, presented.generation)
        (remembered,) = seen.gather().wakes
        (unknown,) = late.gather().wakes  # started after the acknowledgement deleted the row
    finally:
        seen.close()
        late.close()
        db.close()
    assert remembered.append_latency is not None and remembered.append_latency >= 4.0
    assert unknown.append_latency is None


def test_only_the_newest_wakes_are_kept(fm_home: Home) -> None:
    db = db_for(fm_home)
    for i in range(8):
        deliveries.record(db, 100 + i, f"id{i}", f"check: reason {i}")
    db.close()
    g = Gatherer(fm_home.root, {}, wakes_shown=3)
    frame = g.gather()
    g.close()
    assert [w.reason for w in frame.wakes] == ["check: reason 7", "check: reason 6",
                                               "check: reason 5"]


def test_unsafe_state_raises_for_once_and_is_shown_live(fm_home: Home, tmp_path: Path) -> None:
    crew.add(fm_home, "alpha", "fleet:0.1")
    (tmp_path / "elsewhere").write_text("x")
    os.symlink(tmp_path / "elsewhere", fm_home.beacon)
    g = Gatherer(fm_home.root, {})
    with pytest.raises(StateError):
        g.gather()
    frame = g.frame()
    g.close()
    assert frame.problem is not None and "symlink" in frame.problem
    assert any(line.startswith("problem  ") for line in render(frame, 100))


# --- noticing changes --------------------------------------------------------------------------


def test_the_fingerprint_follows_commits_and_reports_not_beacon_touches(fm_home: Home,
                                                                       top: Gatherer) -> None:
    crew.add(fm_home, "alpha", "fleet:0.1")
    db = db_for(fm_home)
    top.gather()  # opens the viewer's connection
    fp = top.fingerprint()
    fm_home.beacon.write_text("")
    touched = top.fingerprint()
    assert touched != fp  # a beacon appearing is a change (a watcher started)
    os.utime(fm_home.beacon, (time.time() + 5, time.time() + 5))
    assert top.fingerprint() == touched  # its regular touches are not
    queue.append(db, "check", "ci", "ci failed")
    appended = top.fingerprint()
    assert appended != touched
    crew.append_status(fm_home, "alpha", "done: x")
    assert top.fingerprint() != appended
    db.close()


def test_the_steady_part_ignores_the_clock_only(fm_home: Home, top: Gatherer) -> None:
    crew.add(fm_home, "alpha", "fleet:0.1")
    a, b = top.gather(now=5000.0), top.gather(now=5009.0)
    assert a != b and a.steady() == b.steady()
    crew.append_status(fm_home, "alpha", "done: x")
    assert top.gather(now=5009.0).steady() != b.steady()


# --- rendering -----------------------------------------------------------------------------


def busy_frame(crews: int) -> Frame:
    from firstmate.app.top import CrewView, WakeView, WatcherView

    members = tuple(CrewView(f"crew-{i:02d}", f"fleet:{i}.0", "working: " + "界" * 80,
                             90.0, 95.0) for i in range(crews))
    wakes = tuple(WakeView(99.0, "check: " + "x" * 300, 1, 2.5, 0.004) for _ in range(5))
    return Frame("/h", 100.0, True, WatcherView("healthy", 42, 97.0, 300.0), 3, 7, 40.0,
                 "pending:downtime:1.2.ab", False, members, wakes)


@pytest.mark.parametrize("width", [1, 20, 40, 57, 100, 200])
def test_every_line_fits_the_width(width: int) -> None:
    for line in render(busy_frame(4), width):
        assert width_of(line) <= width, line


def test_a_short_screen_counts_the_crews_it_cannot_show() -> None:
    lines = render(busy_frame(40), 100, height=24, footer="q quits")
    assert len(lines) == 24
    more = [line for line in lines if "more crew(s)" in line]
    assert len(more) == 1
    shown = sum(1 for line in lines if line.startswith("  crew-"))
    assert more[0].strip() == f"… and {40 - shown} more crew(s)"
    assert lines[-1] == "q quits"  # the footer keeps its place
    assert "last wakes (1 of 5)" in lines  # older wakes gave up their lines first
    roomy = render(busy_frame(3), 100, height=24, footer="q quits")
    assert "last wakes (5)" in roomy and not any("more crew" in line for line in roomy)


def test_figures_are_readable() -> None:
    text = "\n".join(render(busy_frame(1), 200))
    assert "watcher  healthy  pid 42  beacon 3s ago" in text
    assert "queue    3 rows  oldest #7, 1m00s old" in text
    assert "    1s     2.5s      4ms  check: xxx" in text


def test_a_hand_written_status_line_cannot_drive_the_terminal(fm_home: Home,
                                                              top: Gatherer) -> None:
    crew.add(fm_home, "alpha", "fleet:0.1")
    with open(crew.path(fm_home, "alpha", crew.STATUS), "ab") as log:
        log.write(b"1000.000\tdone: \x1b[2J\x1b]0;owned\x07cleared\x9b31m red\n")
    text = "\n".join(render(top.gather(now=1001.0), 120))
    assert ESC not in text and "\x07" not in text and "\x9b" not in text
    assert "done: cleared" in text


# --- the command -----------------------------------------------------------------------------


def run_fm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(fm_command(*args), capture_output=True, text=True, timeout=DEADLINE,
                          stdin=subprocess.DEVNULL, check=False)


def test_once_prints_one_plain_frame(fm_home: Home) -> None:
    crew.add(fm_home, "alpha", "fleet:0.1")
    crew.append_status(fm_home, "alpha", "done: shipped")
    done = run_fm("top", "--once")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("fm top ") and ESC not in done.stdout
    assert any(line.split()[:2] == ["alpha", "-"] and line.endswith("done: shipped")
               for line in done.stdout.splitlines())
    assert done.stdout.count("fm top ") == 1


def test_once_on_unsafe_state_is_one_line_and_exit_4(fm_home: Home, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_text("x")
    os.symlink(tmp_path / "elsewhere", fm_home.lock_path("watch"))
    done = run_fm("top", "--once")
    assert done.returncode == 4 and done.stdout == ""
    assert done.stderr.startswith("fm: ") and done.stderr.count("\n") == 1


@pytest.mark.parametrize("args", [["--interval", "0"], ["--interval", "nan"], ["--bogus"],
                                  ["extra"]])
def test_bad_arguments_are_a_usage_error(fm_home: Home, args: list[str]) -> None:
    done = run_fm("top", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("fm: top: ") and done.stderr.count("\n") == 1
    assert done.stderr.endswith("; run 'fm top --help'\n")


def test_help_names_the_options() -> None:
    done = run_fm("top", "--help")
    assert done.returncode == 0
    assert "--once" in done.stdout and "--interval SECONDS" in done.stdout


class Reader:
    """Everything a child wrote to its stdout so far, read with a deadline."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.text = ""

    def until(self, ok: Callable[[str], bool], what: str) -> str:
        assert self.popen.stdout is not None
        fd = self.popen.stdout.fileno()
        end = time.monotonic() + DEADLINE
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while not ok(self.text):
                left = end - time.monotonic()
                if left <= 0 or (self.popen.poll() is not None and not sel.select(0)):
                    pytest.fail(f"{what} never came (rc {self.popen.poll()}); got {self.text!r}")
                if sel.select(left):
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        pytest.fail(f"stdout closed before {what}; got {self.text!r}")
                    self.text += chunk.decode(errors="replace")
        return self.text


def test_plain_mode_appends_a_frame_when_a_crew_reports(fm_home: Home) -> None:
    crew.add(fm_home, "alpha", "fleet:0.1")
    popen = subprocess.Popen(fm_command("top", "--interval", "600"), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out = Reader(popen)
        out.until(lambda t: "(none delivered yet)\n" in t, "the first frame")
        crew.append_status(fm_home, "alpha", "done: seen by the viewer")
        text = out.until(lambda t: "done: seen by the viewer" in t, "a frame with the report")
        db = db_for(fm_home)
        queue.append(db, "check", "ci", "ci failed")
        db.close()
        text = out.until(lambda t: "queue    1 row " in t, "a frame with the queued row")
        popen.send_signal(signal.SIGTERM)
        assert popen.wait(timeout=DEADLINE) == 143
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait(timeout=DEADLINE)
    assert ESC not in text
    frames = text.rstrip("\n").split("\n\nfm top ")
    assert len(frames) == 3  # one frame per change: nothing else changed, nothing else printed
    assert popen.stderr is not None and popen.stderr.read() == b""


def test_a_real_cycle_shows_a_healthy_watcher_then_its_wake(fm_home: Home,
                                                            spawned_arm: SpawnedArm) -> None:
    crew.add(fm_home, "alpha", "fleet:0.1")
    assert spawned_arm.status.startswith("watcher: started"), spawned_arm.status
    popen = subprocess.Popen(fm_command("top"), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
    try:
        out = Reader(popen)
        out.until(lambda t: "watcher  healthy  pid " in t, "a frame with the healthy watcher")
        crew.append_status(fm_home, "alpha", "done: end to end")
        assert spawned_arm.wait_reason() == "signal: alpha.status: done: end to end"
        wake = re.compile(r"^ +\S+ +(\d+ms|\d+\.\ds) +(\d+ms|\d+\.\ds) +"
                          r"signal: alpha\.status: done: end to end$", re.MULTILINE)
        out.until(lambda t: wake.search(t) is not None, "the wake with both latencies")
    finally:
        popen.terminate()
        popen.wait(timeout=DEADLINE)


def test_plain_mode_shows_unsafe_state_and_recovers_once_fixed(fm_home: Home,
                                                              tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_text("x")
    os.symlink(tmp_path / "elsewhere", fm_home.beacon)
    popen = subprocess.Popen(fm_command("top"), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        out = Reader(popen)
        out.until(lambda t: "problem  refusing symlinked state path" in t, "the problem line")
        fm_home.beacon.unlink()
        out.until(lambda t: "watcher  none" in t, "a frame once the link is gone")
    finally:
        popen.terminate()
        assert popen.wait(timeout=DEADLINE) == 143
    assert popen.stderr is not None and popen.stderr.read() == b""


def test_a_tiny_screen_keeps_the_footer() -> None:
    lines = render(busy_frame(40), 60, height=8, footer=["steer crew-00: run it_", "keys"])
    assert len(lines) == 8 and lines[-2:] == ["steer crew-00: run it_", "keys"]
    assert lines[0].startswith("fm top ")
