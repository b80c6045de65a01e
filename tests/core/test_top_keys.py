"""``fm top`` at a terminal, as a user meets it: crews in panes of a private tmux server
(fleet_support), ``fm top`` in a pane of another (term_support), 80 columns by 24 lines, driven
with keys and read back with capture-pane. Its keys select a crew and attach to it, peek at it,
steer it, answer its decision or stop it, each through the command's own checks."""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from collections.abc import Iterator

import pytest
from firstmate.app.top_view import width_of
from firstmate.store import crew, deliveries
from firstmate.testing.procs import eventually
from fleet_support import Fleet
from term_support import PROMPT, Pane, terminal
from wakeq_support import db_for

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="the tmux binary is not installed: crews run in tmux")

KEYS_LINE = "j/k select · a attach · p peek · s steer · d answer · x stop · q quits"
SGR = re.compile(r"\x1b\[[0-9;]*m")


def recorder(fleet: Fleet, name: str) -> str:
    """Window *name* of session ``fleet``: shows ``hello-<name>``, then writes every line typed
    into it to ``records/<name>.typed``; the crew *name* is bound to it. Its pane id."""
    script = f"echo hello-{name}; exec cat > {shlex.quote(str(fleet.records / (name + '.typed')))}"
    exists = fleet.tmux("has-session", "-t", "=fleet").returncode == 0
    where = (["new-window", "-d", "-t", "=fleet:"] if exists else
             ["new-session", "-d", "-s", "fleet", "-x", "100", "-y", "30"])
    made = fleet.tmux(*where, "-n", name, "-P", "-F", "#{pane_id}", "sh", "-c", script)
    assert made.returncode == 0, made.stderr
    pane = made.stdout.strip()
    eventually(f"{name}'s pane to start",
               lambda: f"hello-{name}" in fleet.tmux("capture-pane", "-p", "-t", pane).stdout)
    done = fleet.fm("crew", "add", name, "--pane", pane)
    assert done.returncode == 0, done.stderr
    return pane


def typed(fleet: Fleet, name: str) -> str:
    path = fleet.records / f"{name}.typed"
    return path.read_text() if path.exists() else ""


@pytest.fixture
def desk(fleet: Fleet) -> Iterator[Pane]:
    """The user's terminal, 80 × 24, outside tmux as far as its shell knows."""
    keep = ("PATH", "PYTHONPATH", "FM_HOME", "FM_TMUX_SOCKET", "FIRSTMATE_KEYS_DIR")
    env = {k: fleet.env[k] for k in keep if k in fleet.env}
    yield from terminal({**env, "HOME": str(fleet.tmp), "LANG": "C.UTF-8"}, width=80,
                        height=24, prefix="fmtopdesk")


def start_top(desk: Pane, *env: str) -> str:
    top = shlex.join([*env, sys.executable, "-m", "firstmate", "top"])
    desk.type(f"{'env ' if env else ''}{top}; echo TOP-EXITED $?")
    return desk.wait_for(lambda s: s.startswith("fm top ") and KEYS_LINE in s, "fm top's panel")


def quit_top(desk: Pane) -> None:
    desk.keys("q")
    desk.wait_for(lambda s: "TOP-EXITED 0" in s, "fm top to quit")


def row(shown: str, name: str) -> str:
    """The crew *name*'s row on the screen (its selection mark left out)."""
    found = [line[2:] for line in shown.splitlines() if line[2:].startswith(f"{name} ")]
    assert len(found) == 1, shown
    return found[0]


def selected(shown: str) -> str:
    marked = [line for line in shown.splitlines() if line.startswith("> ")]
    assert len(marked) == 1, shown
    return marked[0].split()[1]


# --- the panel --------------------------------------------------------------------------------


def test_at_80x24_the_crews_come_first_with_their_state_harness_and_decisions(
        fleet: Fleet, desk: Pane) -> None:
    reports = {"d1": "failed: the build broke", "d2": "blocked: no registry access",
               "d3": "needs-decision: key=db sqlite or postgres?", "d4": "done: shipped",
               "d5": "working: reading the diff", "d6": ""}
    panes = {name: recorder(fleet, name) for name in reports}
    for name, text in reports.items():
        if text:
            crew.append_status(fleet.home, name, text)
    crew.set_harness(fleet.home, "d4", "claude")
    db = db_for(fleet.home)
    for i in range(5):
        deliveries.record(db, 100 + i, f"id{i}", f"signal: d1.status: failed: attempt {i}")
    db.close()
    fleet.tmux("kill-pane", "-t", panes["d6"])
    shown = start_top(desk)
    lines = shown.rstrip("\n").split("\n")
    assert len(lines) <= 24 and all(width_of(line) <= 79 for line in lines), shown
    assert lines[2] == "crews (6)" and lines[-1] == KEYS_LINE
    assert lines[3].split() == ["crew", "harness", "state", "dec", "turn", "end", "age", "last",
                                "status"]
    assert lines.index("crews (6)") < next(i for i, x in enumerate(lines) if x.startswith("watcher"))
    assert row(shown, "d1").split()[:3] == ["d1", "-", "live"]
    assert row(shown, "d3").split()[:4] == ["d3", "-", "live", "!1"]  # an open decision
    assert row(shown, "d4").split()[:3] == ["d4", "claude", "live"]
    assert row(shown, "d6").split()[:3] == ["d6", "-", "gone"]
    assert row(shown, "d2").endswith("  -      0s  blocked: no registry access")
    assert "last wakes (" in shown  # the newest wakes, as many as the window holds
    coloured = {SGR.sub("", line)[2:].split(" ")[0]: line
                for line in desk.screen(escapes=True).splitlines()
                if re.match(r"^(\x1b\[[0-9;]*m)*[ >] (\x1b\[[0-9;]*m)*d\d ", line)}
    for name in ("d1", "d2"):  # failed: and blocked: stand out: red
        assert re.search(r"\x1b\[(1;)?31m(\x1b\[[0-9;]*m)*" + reports[name][:6],
                         coloured[name]), coloured[name]
    assert "\x1b[31m" not in coloured["d5"].split("working:")[1]
    quit_top(desk)
    start_top(desk, "NO_COLOR=1")
    assert "\x1b[" not in desk.screen(escapes=True).replace("\x1b[39m", "").replace(
        "\x1b[49m", "").replace("\x1b[0m", "")
    quit_top(desk)


def test_more_crews_than_lines_scroll_with_the_selection(fleet: Fleet, desk: Pane) -> None:
    for i in range(30):
        crew.add(fleet.home, f"c{i:02d}", f"%{9000 + i}")
    shown = start_top(desk)
    assert selected(shown) == "c00" and "more crew(s)" in shown
    for _ in range(25):
        desk.press("j")
    shown = desk.wait_for(lambda s: "> c25 " in s, "c25 selected and in view")
    assert "more above" in shown and len(shown.rstrip("\n").split("\n")) <= 24
    desk.press("Up")
    desk.wait_for(lambda s: "> c24 " in s, "the arrow key moving the selection up")
    quit_top(desk)


def test_p_peeks_at_the_selected_crews_screen_and_any_key_returns(fleet: Fleet,
                                                                   desk: Pane) -> None:
    recorder(fleet, "d1")
    d2 = recorder(fleet, "d2")
    shown = start_top(desk)
    assert selected(shown) == "d1"
    desk.press("Down")
    desk.wait_for(lambda s: "> d2 " in s, "d2 selected")
    desk.keys("p")
    shown = desk.wait_for(lambda s: s.startswith(f"peek d2  pane {d2}"), "the peek")
    assert "hello-d2" in shown and "hello-d1" not in shown
    desk.keys("z")
    desk.wait_for(lambda s: s.startswith("fm top ") and "> d2 " in s, "the panel again")
    quit_top(desk)


def test_s_steers_the_selected_crew_with_the_text_typed(fleet: Fleet, desk: Pane) -> None:
    recorder(fleet, "d1")
    d2 = recorder(fleet, "d2")
    start_top(desk)
    desk.press("Down")
    desk.keys("s")
    desk.wait_for(lambda s: "steer d2: _" in s, "the steer prompt")
    desk.keys("run the suite; then #(report)x")
    desk.press("BSpace")
    desk.wait_for(lambda s: "steer d2: run the suite; then #(report)_" in s, "the text typed")
    desk.press("Enter")
    desk.wait_for(lambda s: f"sent to d2 (pane {d2})" in s, "the confirmation")
    eventually("the instruction in d2's pane",
               lambda: typed(fleet, "d2") == "run the suite; then #(report)\n" or None)
    assert typed(fleet, "d1") == ""
    desk.keys("s")
    desk.wait_for(lambda s: "steer d2: _" in s, "the steer prompt again")
    desk.keys("never sent")
    desk.press("Escape")
    desk.wait_for(lambda s: "cancelled" in s, "the prompt cancelled")
    quit_top(desk)
    assert typed(fleet, "d2") == "run the suite; then #(report)\n"


def test_d_answers_the_open_decision_picked_with_tab(fleet: Fleet, desk: Pane) -> None:
    d1 = recorder(fleet, "d1")
    crew.append_status(fleet.home, "d1", "needs-decision: key=db sqlite or postgres?")
    crew.append_status(fleet.home, "d1", "needs-decision: key=ci rerun the flaky job?")
    shown = start_top(desk)
    assert row(shown, "d1").split()[3] == "!2"
    desk.keys("d")
    desk.wait_for(lambda s: "answer d1, decision key: db_" in s and "(db, ci)" in s,
                  "the key prompt, the oldest open decision first")
    desk.press("Tab")
    desk.wait_for(lambda s: "answer d1, decision key: ci_" in s, "Tab picking the next one")
    desk.press("Enter")
    desk.wait_for(lambda s: "answer d1 [key=ci]: _" in s, "the answer prompt")
    desk.keys("yes, once")
    desk.press("Enter")
    desk.wait_for(lambda s: f"answered d1 [key=ci] and sent it to pane {d1}" in s, "the answer")
    eventually("the answer line in d1's pane",
               lambda: typed(fleet, "d1") == "answered: key=ci yes, once\n" or None)
    assert [d.key for d in crew.open_decisions(fleet.home, "d1")] == ["db"]
    shown = desk.wait_for(lambda s: row(s, "d1").split()[3] == "!1", "one decision left")
    desk.keys("d")  # one open decision: straight to its answer
    desk.wait_for(lambda s: "answer d1 [key=db]: _" in s, "the answer prompt for db")
    desk.press("Escape")
    quit_top(desk)


def test_x_stops_the_selected_crew_only_once_confirmed(fleet: Fleet, desk: Pane) -> None:
    d1 = recorder(fleet, "d1")
    recorder(fleet, "d2")
    start_top(desk)
    desk.keys("x")
    desk.wait_for(lambda s: "stop d1? its pane ends" in s, "the confirmation question")
    desk.keys("n")
    desk.wait_for(lambda s: "d1 was not stopped" in s, "no stop")
    assert crew.exists(fleet.home, "d1")
    desk.keys("x")
    desk.wait_for(lambda s: "stop d1?" in s, "the question again")
    desk.keys("y")
    shown = desk.wait_for(lambda s: f"stopped d1 (ended pane {d1})" in s and "crews (1)" in s,
                          "d1 stopped")
    assert selected(shown) == "d2"  # the selection moved to the crew now in its place
    assert not crew.exists(fleet.home, "d1")
    assert d1 not in fleet.tmux("list-panes", "-a", "-F", "#{pane_id}").stdout.split()
    quit_top(desk)


def test_an_action_the_command_refuses_shows_its_one_line(fleet: Fleet, desk: Pane) -> None:
    d1 = recorder(fleet, "d1")
    recorder(fleet, "d2")
    fleet.tmux("kill-pane", "-t", d1)
    start_top(desk, "FM_CREW=d2")  # (fm top run in a crew's session)
    desk.keys("s")
    desk.keys("anything")
    desk.press("Enter")
    shown = desk.wait_for(lambda s: f"crew 'd1''s pane {d1} is gone; nothing was typed - fm "
                                    "crew stop d1 unregisters it" in " ".join(s.split()),
                          "the steer refusal, whole")
    assert all(width_of(line) <= 79 for line in shown.splitlines())
    desk.keys("d")
    desk.wait_for(lambda s: "d1 has no open decision to answer" in s, "nothing to answer")
    desk.keys("p")
    desk.wait_for(lambda s: "is gone; nothing was read" in " ".join(s.split()), "peek refused")
    desk.press("Down")
    crew.append_status(fleet.home, "d2", "needs-decision: key=k which?")
    desk.wait_for(lambda s: "!1" in row(s, "d2"), "d2's decision")
    desk.keys("d")
    desk.keys("no")
    desk.press("Enter")
    desk.wait_for(lambda s: "refusing to run in a crew's session (FM_CREW=d2)" in s,
                  "answering refused in a crew's session")
    assert typed(fleet, "d2") == "" and crew.open_decisions(fleet.home, "d2")
    quit_top(desk)


# --- attach -----------------------------------------------------------------------------------


def clients(fleet: Fleet) -> list[str]:
    out = fleet.tmux("list-clients", "-F", "#{session_name} #{pane_id}").stdout
    return [line for line in out.splitlines() if line]


def test_a_attaches_this_terminal_to_the_crews_pane_and_detaching_comes_back(
        fleet: Fleet, desk: Pane) -> None:
    recorder(fleet, "d1")
    d2 = recorder(fleet, "d2")
    start_top(desk)
    desk.press("j")
    desk.keys("a")
    eventually("a client on d2's pane", lambda: clients(fleet) == [f"fleet {d2}"] or None)
    desk.wait_for(lambda s: "hello-d2" in s and "fm top" not in s, "d2's screen")
    fleet.tmux("detach-client", "-s", "=fleet")  # (the user's prefix key, then d)
    desk.wait_for(lambda s: s.startswith("fm top ") and f"back from d2 (pane {d2})" in s,
                  "fm top again")
    assert desk.flag("alternate_on") == "1"
    quit_top(desk)


def test_a_inside_tmux_on_the_crews_server_switches_the_client(fleet: Fleet,
                                                                desk: Pane) -> None:
    d1 = recorder(fleet, "d1")
    env = [f"-e{k}={fleet.env[k]}" for k in ("PYTHONPATH", "FM_HOME", "FM_TMUX_SOCKET")]
    made = fleet.tmux("new-session", "-d", "-s", "work", "-x", "80", "-y", "24", *env, "env",
                      f"PS1={PROMPT}", "LANG=C.UTF-8", "sh")
    assert made.returncode == 0, made.stderr
    desk.type(f"tmux -L {shlex.quote(fleet.socket)} attach-session -t =work")
    eventually("the terminal attached to session work",
               lambda: [c for c in clients(fleet) if c.startswith("work ")] or None)
    work = Pane(fleet.socket, "=work:")
    work.wait_for(lambda s: PROMPT.strip() in s, "work's shell")
    work.type(shlex.join([sys.executable, "-m", "firstmate", "top"]))
    work.wait_for(lambda s: KEYS_LINE in s, "fm top in session work")
    work.keys("a")
    eventually("the client switched to d1", lambda: clients(fleet) == [f"fleet {d1}"] or None)
    shown = work.wait_for(lambda s: "switched this tmux client to d1" in s, "fm top's note")
    assert shown.startswith("fm top ")  # it runs on in its own pane
    work.keys("q")
