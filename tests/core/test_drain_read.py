"""What ``fm wake drain`` reads like: sections and one line per row, a turn end shown with the
crew's screen (read through the crew backend), an acknowledgement that says what it did, open
decisions as fields in ``--json``, and the recovery episode explained in plain words."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from firstmate.fast import drainview
from firstmate.store import crew
from firstmate.store.home import Home
from firstmate.testing.procs import eventually
from fleet_support import Fleet
from wakeq_support import fm, set_episode
from watch_support import Rig, rig, started_pid

__all__ = ["rig"]

ACK = re.compile(r"^WAKE_ACK_REQUIRED: after handling completes run fm wake drain (.*)$", re.M)


def acknowledge(home: Home, drained: subprocess.CompletedProcess[str],
                **env: str) -> subprocess.CompletedProcess[str]:
    found = ACK.search(drained.stderr)
    assert found is not None, drained.stderr
    return fm(home, "wake", "drain", *found.group(1).split(), **env)


# --- a turn end shows the crew's screen (a real tmux server on a private socket) ---------------


#: What the crew's pane shows: twelve lines, blanks between some, a colour, a bidi override, a
#: line longer than the drain keeps.
SCREEN = ("printf 'line %s\\n\\n' 1 2 3 4 5 6; printf 'colour \\033[31mred\\033[0m\\n'; "
          "printf 'bidi \\342\\200\\256evil\\n'; printf '%0300d\\n' 0; printf 'line 7\\nEND\\n'; "
          "exec sleep 100000")


def subprocess_pid(fleet: Fleet, target: str) -> int:
    """The pid of the program in pane *target* now."""
    return int(fleet.tmux("display-message", "-p", "-t", target, "#{pane_pid}").stdout)


def shows(fleet: Fleet, target: str, text: str) -> None:
    eventually(f"pane {target} to show {text!r}",
               lambda: text in fleet.tmux("capture-pane", "-p", "-t", target).stdout)


@pytest.mark.tmux
def test_a_turn_end_shows_the_last_lines_of_the_crews_screen(fleet: Fleet) -> None:
    made = fleet.tmux("new-session", "-d", "-s", "crews", "-x", "400", "-y", "40", "-P", "-F",
                      "#{pane_id}", "sh", "-c", SCREEN)
    assert made.returncode == 0, made.stderr
    target = made.stdout.strip()
    # (a second pane keeps the server up once the crew's pane is closed)
    assert fleet.tmux("new-window", "-d", "-t", "crews:", "sh", "-c", "exec sleep 100000").returncode == 0
    shows(fleet, target, "END")
    added = fleet.fm("crew", "add", "w1", "--pane", target)
    assert added.returncode == 0, added.stderr
    assert crew.get(fleet.home, "w1").pid is not None  # bound to the pane's program
    crew.append_status(fleet.home, "w1", "working: the parser")
    assert fleet.fm("wake", "append", "signal", "w1.turn-ended", "signal: w1.turn-ended").returncode == 0
    drained = fleet.fm("wake", "drain")
    assert drained.returncode == 0, drained.stderr
    lines = drained.stdout.splitlines()
    start = lines.index(f"SCREEN w1 (pane {target}), its last 8 non-blank lines now (the turn "
                        "ended before):")
    assert lines[start + 1:start + 9] == [
        "  | line 4", "  | line 5", "  | line 6", "  | colour red", "  | bidi evil",
        "  | " + "0" * 199 + "\u2026", "  | line 7", "  | END"]
    assert lines[start - 1].endswith("w1.status: working: the parser; historical / not "
                                     "necessarily the triggering event")
    assert drained.stderr.startswith("WAKE_ACK_REQUIRED: ")
    # --json: the screen as fields.
    data = json.loads(fleet.fm("wake", "drain", "--json").stdout)
    assert data["screens"] == [{"crew": "w1", "pane": target, "error": None,
                                "lines": [line[4:] for line in lines[start + 1:start + 9]]}]
    # Another program in the crew's pane (same id): it is not the crew's screen, so it is not
    # read, and one line says why.
    assert fleet.tmux("respawn-pane", "-k", "-t", target, "sh", "-c",
                      "echo SECRET of another program; exec sleep 100000").returncode == 0
    shows(fleet, target, "SECRET")
    other = fleet.fm("wake", "drain")
    assert other.returncode == 0 and "SECRET" not in other.stdout
    assert [line for line in other.stdout.splitlines() if line.startswith("SCREEN ")] == [
        f"SCREEN w1 (pane {target}): not read: pane {target} now runs another program (pid "
        f"{subprocess_pid(fleet, target)}, not the registered {crew.get(fleet.home, 'w1').pid})"]
    # The pane closed: one line says so, and the drain still completes.
    assert fleet.tmux("kill-pane", "-t", target).returncode == 0
    again = fleet.fm("wake", "drain")
    assert again.returncode == 0, again.stderr
    gone = [line for line in again.stdout.splitlines() if line.startswith("SCREEN ")]
    assert gone == [f"SCREEN w1 (pane {target}): not read: pane {target} is gone"]
    found = ACK.search(again.stderr)
    assert found is not None
    assert fleet.fm("wake", "drain", *found.group(1).split()).returncode == 0


def test_a_turn_end_whose_screen_cannot_be_read_is_one_line_and_at_most_four_are_read(
        fm_home: Home, tmp_path: Path) -> None:
    for i in range(6):
        crew.add(fm_home, f"c{i}", f"%{i + 1}")
        assert fm(fm_home, "wake", "append", "signal", f"c{i}.turn-ended",
                  f"signal: c{i}.turn-ended").returncode == 0
    no_tmux = {"FM_TMUX": str(tmp_path / "no-tmux")}
    drained = fm(fm_home, "wake", "drain", **no_tmux)
    assert drained.returncode == 0, drained.stderr
    screens = [line for line in drained.stdout.splitlines() if line.startswith("SCREEN")]
    why = f"tmux could not be asked: tmux binary '{tmp_path / 'no-tmux'}' not found (set FM_TMUX)"
    assert screens == [f"SCREEN c{i} (pane %{i + 1}): not read: {why}" for i in range(4)] + [
        "SCREENS: 2 more crews ended a turn; their screens are not shown (at most 4 a drain)"]
    assert acknowledge(fm_home, drained).returncode == 0


def test_a_crew_registered_by_a_position_not_bound_yet_is_not_read(fm_home: Home) -> None:
    # The position may name another crew's pane by now: nothing is read from it.
    crew.add(fm_home, "pos", "fleet:3.0")
    assert not crew.get(fm_home, "pos").bound
    assert fm(fm_home, "wake", "append", "signal", "pos.turn-ended", "signal: pos.turn-ended").returncode == 0
    drained = fm(fm_home, "wake", "drain")
    assert [line for line in drained.stdout.splitlines() if line.startswith("SCREEN")] == [
        "SCREEN pos (pane fleet:3.0): not read: pane fleet:3.0 is a position no pane is bound to "
        "yet (fm crew list binds it)"]


def test_a_crew_of_another_host_is_not_read_here(fm_home: Home) -> None:
    from firstmate.app.drain_context import read_screens
    crew.add(fm_home, "far", "%3", host="hostb")
    assert read_screens(fm_home, {"FM_TMUX": "/nonexistent/tmux"}, ["far"]) == [
        ("far", crew.get(fm_home, "far").shown, None,
         "the crew works on host hostb; fm crew peek far reads its screen there")]


def test_screen_text_is_sanitised_and_bounded() -> None:
    text = "\n".join([f"row {i}" for i in range(20)] + ["", "   ", "\x1b]0;title\x07osc \u202eflip",
                                                      "tab\there", "z" * 500, "\x00\x07"])
    lines = drainview.screen_lines("w1", "%3", text, None)
    assert lines[0] == "SCREEN w1 (pane %3), its last 8 non-blank lines now (the turn ended before):"
    assert lines[1:] == ["  | row 15", "  | row 16", "  | row 17", "  | row 18", "  | row 19",
                         "  | osc flip", "  | tab here", "  | " + "z" * 200]
    assert drainview.screen_lines("w1", "%3", "\n \n", None) == ["SCREEN w1 (pane %3): blank"]
    assert drainview.screen_lines("w1", "%3", None, "can't find\npane\x1b[2J: 3") == [
        "SCREEN w1 (pane %3): not read: can't find pane: 3"]


# --- the acknowledgement says what it did ----------------------------------------------------


def test_the_acknowledgement_confirms_in_one_line_on_both_paths(fm_home: Home) -> None:
    for key in ("a", "b", "c"):
        assert fm(fm_home, "wake", "append", "signal", key, f"signal: {key}").returncode == 0
    drained = fm(fm_home, "wake", "drain")
    generation = ACK.search(drained.stderr).group(1).split()[3]  # type: ignore[union-attr]
    partial = fm(fm_home, "wake", "drain", "--ack-through", "2", "--recovery-generation", generation)
    assert (partial.returncode, partial.stderr) == (0, "")
    assert partial.stdout == (
        "WAKE ACKNOWLEDGED through row 2: 2 rows consumed; recovery episode stays open "
        f"(pending:handling:{generation}); 1 row still queued: run fm wake drain to handle it.\n")
    # The store's path (--actor main spelled out still runs the same words; --json the fields).
    rest = fm(fm_home, "wake", "drain", "--ack-through", "3", "--recovery-generation", generation,
              "--json")
    data = json.loads(rest.stdout)
    assert data["confirmation"] == (f"WAKE ACKNOWLEDGED through row 3: 1 row consumed; recovery "
                                    f"episode {generation} closed; nothing else is queued.")
    assert (data["consumed"], data["remaining"], data["episode"]) == (
        1, 0, f"acked:handling:{generation}")
    again = fm(fm_home, "wake", "drain", "--ack-through", "3", "--recovery-generation", generation)
    assert again.stdout == (f"WAKE ACKNOWLEDGED through row 3: no row left to consume (already "
                            f"acknowledged); recovery episode {generation} closed; nothing else "
                            "is queued.\n")


def test_an_acknowledgement_with_a_notice_says_only_the_notice(fm_home: Home) -> None:
    assert fm(fm_home, "wake", "append", "signal", "a", "signal: a").returncode == 0
    fm(fm_home, "wake", "drain")
    done = fm(fm_home, "wake", "drain", "--ack-through", "1", "--recovery-generation", "made.up")
    assert done.returncode == 0 and done.stdout == ""
    assert done.stderr.startswith("wake drain: acknowledged wakes through 1 (1 row(s) consumed), "
                                  "but recovery generation made.up was never printed")


# --- --json: decisions as fields -------------------------------------------------------------


def test_json_gives_open_decisions_as_fields_with_their_answer_command(fm_home: Home) -> None:
    crew.add(fm_home, "alpha", "%1")
    crew.append_status(fm_home, "alpha", "needs-decision: key=db which store: postgres or sqlite?")
    crew.append_status(fm_home, "alpha", "needs-decision: the release notes look right to you")
    assert fm(fm_home, "wake", "append", "signal", "alpha.status", "signal: alpha.status").returncode == 0
    data = json.loads(fm(fm_home, "wake", "drain", "--json").stdout)
    decisions = [{k: v for k, v in d.items() if k != "asked_at"} for d in data["decisions"]]
    assert decisions == [
        {"crew": "alpha", "key": "db", "keyed": True,
         "question": "which store: postgres or sqlite?", "options": ["postgres", "sqlite"],
         "answer_command": 'fm crew answer alpha --key db "<answer>"'},
        {"crew": "alpha", "key": "line2", "keyed": False,
         "question": "the release notes look right to you", "options": [],
         "answer_command": 'fm crew answer alpha --key line2 "<answer>"'}]
    assert all(isinstance(d["asked_at"], float) for d in data["decisions"])
    # Fields, not lines (the unread status still lists the lines the crew wrote).
    assert not any(line.startswith("OPEN DECISIONS") for line in data["context"])
    assert data["explain"] == [f"signal: {drainview.SECTIONS[0][2]}"]
    # The command it gives answers the decision.
    answered = fm(fm_home, *data["decisions"][0]["answer_command"].replace('"<answer>"', "sqlite")
                  .split()[1:])
    assert answered.returncode == 0, answered.stderr
    assert [d["key"] for d in json.loads(fm(fm_home, "wake", "drain", "--json").stdout)
            ["decisions"]] == ["line2"]


@pytest.mark.parametrize(("question", "expected"), [
    ("postgres or sqlite?", ["postgres", "sqlite"]),
    ("which store: postgres, sqlite or duckdb?", ["postgres", "sqlite", "duckdb"]),
    ("merge now or wait for CI?", ["merge now", "wait for CI"]),
    ("options: rebase, merge, squash", ["rebase", "merge", "squash"]),
    ("Choices: a | b", ["a", "b"]),
    ("pick a strategy [rebase|merge]", ["rebase", "merge"]),
    ("which way (left/right)?", ["left", "right"]),
    ("(1) ship it (2) hold it (3) drop it", ["ship it", "hold it", "drop it"]),
    ("what now: a) retry, b) skip", ["retry", "skip"]),
    ("use (a) the fast path or (b) the full path?", ["the fast path", "the full path"]),
    ("see data) and b) no", []),
    ("should I merge now or wait for CI?", []),
    ("which way for part two?", []),
    ("the release notes look right to you", []),
    ("", []),
])
def test_options_are_read_only_when_the_question_spells_them_out(question: str,
                                                                 expected: list[str]) -> None:
    assert drainview.options(question) == expected


# --- the episode explained in plain words ----------------------------------------------------


def test_a_drain_with_nothing_to_do_says_so(fm_home: Home) -> None:
    done = fm(fm_home, "wake", "drain")
    assert (done.returncode, done.stdout, done.stderr) == (0, drainview.NOTHING + "\n", "")
    set_episode(fm_home, "pending", "handling", "seed.1.a")
    done = fm(fm_home, "wake", "drain")
    assert done.stdout == ("NOTHING NEW: the wake that brought you here was already drained and "
                           "acknowledged with an earlier one; acknowledge to close its episode.\n")
    assert acknowledge(fm_home, done).stdout == ("WAKE ACKNOWLEDGED: no rows to consume; recovery "
                                                 "episode seed.1.a closed; nothing else is queued.\n")


def test_a_resurface_wake_is_explained_by_the_drain(rig: Rig) -> None:
    owner = rig.spawn("arm", env={"FM_ARM_SUCCESSOR_CONFIRM_TIMEOUT": "2"})
    os.kill(started_pid(owner.line()), signal.SIGKILL)
    assert owner.line() == "watcher: FAILED - cycle ended without an actionable reason"
    owner.wait()
    rig.append("check", "late", "check: arrived while down")
    nxt = rig.spawn("arm")
    started_pid(nxt.line())
    assert nxt.line() == "check: rearm-resurface"
    assert nxt.wait() == 0
    drained = rig.fm("wake", "drain")
    assert drained.returncode == 0, drained.stderr
    lines = drained.stdout.splitlines()
    assert lines[0].startswith("RECOVERY: what is below waited while no watcher was running (or "
                               "after a wake that was not acknowledged), so nothing woke you for "
                               "it; the oldest row was queued at ")
    assert lines[0].endswith(". Handle it as usual: the acknowledgement also closes this "
                             "recovery episode.")
    assert lines[1:] == [drainview.header("check", 1), "  #1 [late] check: arrived while down"]
    found = ACK.search(drained.stderr)
    assert found is not None
    acked = rig.fm("wake", "drain", *found.group(1).split())
    assert acked.stdout.endswith("closed; nothing else is queued.\n"), acked.stdout
