"""Names, paths and texts fm hands tmux reach it literally: tmux expands formats (``#(cmd)``
runs a command) in ``new-window``/``new-session``'s ``-n``, ``-s`` and ``-c``, and takes an
argument ending in ``;`` as its command separator. A real tmux server on a private socket and
the stand-in crew harness (fleet_support)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from firstmate.store import crew
from firstmate.testing.procs import eventually
from firstmate.watch.backends import tmux
from fleet_support import Fleet, spawned

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="the tmux binary is not installed: crews run in tmux")


def pwned(root: Path) -> list[Path]:
    """Files a format job (``#(touch pwned-…)``, run in the tmux client's directory) made."""
    return sorted(root.rglob("pwned-*"))


def test_hostile_directory_window_and_session_names_reach_tmux_as_they_are(fleet: Fleet) -> None:
    project = fleet.tmp / "proj#(touch pwned-c)"
    project.mkdir()
    window, session = "w#(touch pwned-n) #[fg=red]", "s#(touch pwned-s) #{pane_id} ##[x"
    done = spawned(fleet, "w1", "--cwd", str(project), "--window-name", window,
                   "--session", session, "--", "task")
    # What fm prints is what tmux has: no format expanded, no command run.
    assert f"window {session}:{window}\n" in done.stdout
    listed = fleet.tmux("list-windows", "-a", "-F", "#{session_name}\t#{window_name}").stdout
    assert f"{session}\t{window}" in listed.splitlines()
    assert fleet.started("w1")["cwd"] == str(project)
    # (the crew's own report comes well after tmux ran any job the names would have started)
    eventually("the crew's first report", lambda: crew.last_line(fleet.home, "w1"))
    assert pwned(fleet.tmp) == []
    # A second crew goes into the existing session, found by its exact name.
    spawned(fleet, "w2", "--session", session, "--", "task")
    sessions = fleet.tmux("list-sessions", "-F", "#{session_name}").stdout.splitlines()
    assert sessions == [session]


def test_a_directory_ending_in_a_semicolon_is_a_directory(fleet: Fleet) -> None:
    project = fleet.tmp / "proj;"
    project.mkdir()
    spawned(fleet, "w1", "--cwd", str(project), "--window-name", "tests;", "--", "task")
    assert fleet.started("w1")["cwd"] == str(project)
    assert "tests;" in fleet.tmux("list-windows", "-a", "-F", "#{window_name}").stdout.split()


@pytest.mark.parametrize("session", ["a.b", "a:b", "a$b", "a\\b", "line\nbreak", " "])
def test_a_session_name_tmux_would_change_is_refused_in_one_line(fleet: Fleet,
                                                                  session: str) -> None:
    done = fleet.fm("crew", "spawn", "w1", "--harness", "fakecrew", "--session", session,
                    "--", "t")
    assert done.returncode == 2 and "invalid tmux session name" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not crew.exists(fleet.home, "w1")
    assert fleet.tmux("list-sessions").returncode != 0  # no server was even started


def test_steer_types_a_trailing_semicolon_and_escapes_as_they_are(fleet: Fleet) -> None:
    spawned(fleet, "w1", "--", "task")
    eventually("the first turn", lambda: fleet.turns("w1"))
    texts = ["run the tests;", ";", ";;", "a\\;", "x #(touch pwned-t) #{pane_id}", "-l {"]
    for text in texts:
        done = fleet.fm("crew", "steer", "w1", "--", text)
        assert done.returncode == 0, done.stderr
    eventually("every steered line", lambda: len(fleet.turns("w1")) == 1 + len(texts))
    assert fleet.turns("w1")[1:] == texts
    assert pwned(fleet.tmp) == []


def test_literal_arguments() -> None:
    assert tmux.literal("run the tests;") == "run the tests\\;"
    assert tmux.literal("a\\;") == "a\\\\;" and tmux.literal(";") == "\\;"
    assert tmux.literal("a;b") == "a;b"
    assert tmux.literal_format("w#(x)#{y}##") == "w##(x)##{y}####"
    # (a run of # before [ is a style tmux copies as it is)
    assert tmux.literal_format("a#[b ##[c #x#[") == "a#[b ##[c ##x#["
    fact = tmux.parse_fact("s\tname\twith\ttabs\t%12\t4242\t0\n")
    assert fact is not None and (fact.pane, fact.pid, fact.dead) == ("%12", 4242, False)
    assert (fact.session, fact.window) == ("s", "name\twith\ttabs")
    assert tmux.parse_fact("junk\n") is None and tmux.parse_fact("s\tw\t%x\t1\t0") is None


def test_resolve_follows_tmux_and_never_falls_back(fleet: Fleet) -> None:
    fleet.tmux("new-session", "-d", "-s", "fleet", "-x", "80", "-y", "20", "sleep", "100000")
    fleet.tmux("new-window", "-d", "-t", "fleet", "-n", "two", "sleep", "100000")
    backend: tmux.TmuxBackend = fleet.backend()
    ids = fleet.tmux("list-panes", "-a", "-F", "#{pane_id}").stdout.split()
    first, second = (backend.resolve(target) for target in ("fleet:0.0", "fleet:two"))
    assert first is not None and second is not None
    assert [first.pane, second.pane] == ids and first.pid != second.pid
    assert (second.session, second.window, second.dead) == ("fleet", "two", False)
    # display-message alone names some other pane for a target that names none.
    for target in ("fleet:9.9", "nosuch", "%99999", "fleet:two;"):
        assert backend.resolve(target) is None and backend.last_exit == 1, target
