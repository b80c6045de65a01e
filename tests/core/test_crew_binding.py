"""A crew is bound to its pane, not to a position: tmux's stable pane id and the pane's program,
checked before anything is typed, ended or read for a wake; a closed pane is ``gone`` everywhere
at once and wakes the primary once. A real tmux server on a private socket (fleet_support)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from firstmate.app.crewspawn import _type_prompt
from firstmate.app.top import Gatherer
from firstmate.app.top_view import render
from firstmate.plugin.crewlaunch import CrewLaunch
from firstmate.store import crew
from firstmate.testing.procs import eventually, spawn_arm
from firstmate.watch.sources.base import PollContext, Wake
from firstmate.watch.sources.stale import PaneState, StaleSource
from firstmate.watch.sources.status import StatusSource
from fleet_support import Fleet, spawned

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="the tmux binary is not installed: crews run in tmux")

T0 = 1_700_000_000.0
BUSY = "printf 'Working (12s - esc to interrupt)\\n'; exec sleep 100000"


def recorder(fleet: Fleet, name: str) -> str:
    """A pane program that writes every line typed into it to ``records/<name>.typed``."""
    return f"exec cat > {fleet.records / (name + '.typed')}"


def typed(fleet: Fleet, name: str) -> str:
    path = fleet.records / f"{name}.typed"
    return path.read_text() if path.exists() else ""


def two_panes(fleet: Fleet) -> tuple[str, str]:
    """Window fleet:0 split in two, d1's recorder at fleet:0.0 and d2's at fleet:0.1; their ids."""
    made = fleet.tmux("new-session", "-d", "-s", "fleet", "-x", "120", "-y", "30", "-P", "-F",
                      "#{pane_id}", "sh", "-c", recorder(fleet, "d1"))
    split = fleet.tmux("split-window", "-d", "-t", "fleet:0", "-P", "-F", "#{pane_id}",
                       "sh", "-c", recorder(fleet, "d2"))
    assert made.returncode == 0 and split.returncode == 0, (made.stderr, split.stderr)
    return made.stdout.strip(), split.stdout.strip()


def position(fleet: Fleet, pane: str) -> str:
    return fleet.tmux("display-message", "-p", "-t", pane,
                      "#{session_name}:#{window_index}.#{pane_index}").stdout.strip()


def listed(fleet: Fleet) -> dict[str, str]:
    done = fleet.fm("crew", "list", "--json")
    assert done.returncode == 0, done.stderr
    return {c["name"]: c["pane_state"] for c in json.loads(done.stdout)["crews"]}


def ctx(fleet: Fleet, now: float, triage: list[str] | None = None) -> PollContext:
    return PollContext(home=fleet.home, env={"FM_STALE_SLICE_MS": "600000"}, now=now, poll=1,
                       triage=(triage if triage is not None else []).append)


# --- the command line ------------------------------------------------------------------------


def test_a_closed_pane_never_sends_its_crews_keys_to_the_pane_renumbered_into_its_place(
        fleet: Fleet) -> None:
    p1, p2 = two_panes(fleet)
    for name, target in (("d1", "fleet:0.0"), ("d2", "fleet:0.1")):
        done = fleet.fm("crew", "add", name, "--pane", target)
        assert done.returncode == 0, done.stderr
    fleet.tmux("kill-pane", "-t", p1)
    assert position(fleet, p2) == "fleet:0.0"  # tmux renumbered d2's pane into d1's place
    refused = fleet.fm("crew", "steer", "d1", "rm -rf build")
    assert refused.returncode == 1, refused.stdout
    assert typed(fleet, "d2") == ""  # (d1's instruction never reached d2)
    assert (crew.get(fleet.home, "d1").pane, crew.get(fleet.home, "d2").pane) == (p1, p2)
    assert crew.get(fleet.home, "d1").label == "fleet:0.0"
    assert refused.stderr.startswith(f"fm: crew 'd1''s pane {p1} [fleet:0.0] is gone; nothing "
                                     "was typed - fm crew stop d1 unregisters it")
    assert len(refused.stderr.strip().splitlines()) == 1
    assert listed(fleet) == {"d1": "gone", "d2": "live"}
    # d2 is still reached at its own pane, wherever it now sits.
    assert fleet.fm("crew", "steer", "d2", "for d2").returncode == 0
    eventually("d2's instruction", lambda: typed(fleet, "d2") == "for d2\n")
    stopped = fleet.fm("crew", "stop", "d1")
    assert stopped.returncode == 0 and "was already gone" in stopped.stdout
    assert fleet.backend().pane_state(p2) == "live" and typed(fleet, "d2") == "for d2\n"


def test_a_registration_by_position_is_bound_on_first_use(fleet: Fleet) -> None:
    p1, p2 = two_panes(fleet)
    crew_dir = fleet.home.crew_dir
    crew_dir.mkdir(parents=True, exist_ok=True)
    (crew_dir / "d2.pane").write_text("fleet:0.1\n")  # as fm wrote registrations before
    from firstmate.watch.backends.panes import start_ticks

    assert listed(fleet) == {"d2": "live"}
    bound = crew.get(fleet.home, "d2")
    assert (bound.pane, bound.label) == (p2, "fleet:0.1")
    assert bound.pid is not None and bound.started == start_ticks(bound.pid)
    fleet.tmux("kill-pane", "-t", p1)
    assert fleet.fm("crew", "steer", "d2", "still d2").returncode == 0
    eventually("d2's instruction", lambda: typed(fleet, "d2") == "still d2\n")
    # A position that now names a pane another crew is bound to binds nothing, types nothing.
    (crew_dir / "d3.pane").write_text("fleet:0.0\n")
    refused = fleet.fm("crew", "steer", "d3", "not yours")
    assert refused.returncode == 1 and "crew 'd2''s; nothing was typed" in refused.stderr
    assert crew.get(fleet.home, "d3").pane == "fleet:0.0"
    assert typed(fleet, "d2") == "still d2\n"
    assert listed(fleet) == {"d2": "live", "d3": "gone"}  # (that pane is not d3's)


def test_a_pane_that_runs_another_program_is_not_the_crews(fleet: Fleet) -> None:
    p1, _ = two_panes(fleet)
    assert fleet.fm("crew", "add", "d1", "--pane", p1).returncode == 0
    assert fleet.fm("crew", "status", "d1", "needs-decision: key=go ship it?").returncode == 0
    # The pane's program is replaced (as a restarted server reusing the id would show it).
    fleet.tmux("respawn-pane", "-k", "-t", p1, "sh", "-c", recorder(fleet, "intruder"))
    for argv in (("crew", "steer", "d1", "hello"),
                 ("crew", "answer", "d1", "--key", "go", "--send", "yes")):
        refused = fleet.fm(*argv)
        assert refused.returncode == 1 and "now runs another program" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    assert "the answer was not recorded" in refused.stderr
    assert [d.key for d in crew.open_decisions(fleet.home, "d1")] == ["go"]
    assert listed(fleet) == {"d1": "gone"}
    stop = fleet.fm("crew", "stop", "d1")
    assert stop.returncode == 1 and "nothing was ended" in stop.stderr
    assert fleet.backend().pane_state(p1) == "live" and crew.exists(fleet.home, "d1")
    assert typed(fleet, "intruder") == ""


def test_a_spawned_crew_is_bound_to_its_pane_and_its_harness(fleet: Fleet) -> None:
    from firstmate.watch.backends.panes import start_ticks

    spawned(fleet, "w1", "--", "task")
    member = crew.get(fleet.home, "w1")
    pid = int(fleet.tmux("display-message", "-p", "-t", member.pane, "#{pane_pid}").stdout)
    assert (member.pid, member.started) == (pid, start_ticks(pid))
    # The brief is typed only into that pane and program.
    launch = CrewLaunch(argv=("x",), ready=r"\S")
    wrong = crew.Crew("w1", member.pane, 0.0, pid=pid + 1)
    note = _type_prompt(fleet.backend(), wrong, launch, "the brief", fleet.env)
    assert note is not None and "the brief was not typed" in note
    assert not any("the brief" in turn for turn in fleet.turns("w1"))


def test_top_shows_a_closed_pane_gone_at_once(fleet: Fleet) -> None:
    p1, _ = two_panes(fleet)
    fleet.fm("crew", "add", "d1", "--pane", p1)
    fleet.fm("crew", "add", "d2", "--pane", "fleet:0.1")
    top = Gatherer(fleet.home.root, fleet.env)
    try:
        assert [(c.name, c.pane_state) for c in top.gather().crews] == [("d1", "live"),
                                                                       ("d2", "live")]
        fleet.tmux("kill-pane", "-t", p1)
        frame = top.gather()
    finally:
        top.close()
    assert [(c.name, c.pane_state) for c in frame.crews] == [("d1", "gone"), ("d2", "live")]
    assert any(line.split()[:4] == ["d1", "-", p1, "gone"] for line in render(frame, 120))


# --- the watcher ------------------------------------------------------------------------------


def test_a_closed_pane_wakes_once_and_is_never_read(fleet: Fleet) -> None:
    p1, p2 = two_panes(fleet)
    crew.add(fleet.home, "d1", p1)  # (by id, no program recorded: seen live by the source)
    fleet.fm("crew", "add", "d2", "--pane", "fleet:0.1")
    crew.add(fleet.home, "never", "%99999")  # a pane never seen: its absence wakes nobody
    source = StaleSource(fleet.home, fleet.backend())
    assert source.poll(ctx(fleet, T0)) is None
    fleet.tmux("kill-pane", "-t", p1)
    triage: list[str] = []
    wake = source.poll(ctx(fleet, T0 + 1, triage))
    assert wake == Wake("signal", "d1.exited", "signal: d1.exited")
    source.commit(wake, ctx(fleet, T0 + 1))
    assert source.poll(ctx(fleet, T0 + 2, triage)) is None
    assert StaleSource(fleet.home, fleet.backend()).poll(ctx(fleet, T0 + 3)) is None  # re-armed
    assert f"stale: d1: pane {p1} is gone; not read" in triage
    # Both panes close together (the server stops): one wake names the other.
    fresh = StaleSource(fleet.home, fleet.backend())
    fleet.tmux("kill-server")
    eventually("the server to stop", lambda: fleet.tmux("list-sessions").returncode != 0)
    wake = fresh.poll(ctx(fleet, T0 + 4))
    assert wake == Wake("signal", "d2.exited", "signal: d2.exited")
    fresh.commit(wake, ctx(fleet, T0 + 4))
    state = PaneState.decode((fleet.home.crew_dir / "d2.pane-state").read_text())
    assert state is not None and state.exited == p2


def test_an_ended_harness_wakes_and_two_exits_share_one_wake(fleet: Fleet) -> None:
    p1, p2 = two_panes(fleet)
    fleet.tmux("set-option", "-w", "-t", "fleet:0", "remain-on-exit", "on")
    for name, pane in (("d1", p1), ("d2", p2)):
        assert fleet.fm("crew", "add", name, "--pane", pane).returncode == 0
    source = StaleSource(fleet.home, fleet.backend())
    assert source.poll(ctx(fleet, T0)) is None
    fleet.tmux("kill-pane", "-t", p2)
    fleet.tmux("send-keys", "-t", p1, "C-d")  # d1's program ends; its pane stays, dead
    eventually("d1's program to end", lambda: fleet.backend().pane_state(p1) == "dead")
    wake = source.poll(ctx(fleet, T0 + 1))
    assert wake == Wake("signal", "d1.exited", "signal: d1.exited (with d2)")
    source.commit(wake, ctx(fleet, T0 + 1))
    assert StaleSource(fleet.home, fleet.backend()).poll(ctx(fleet, T0 + 2)) is None


def test_a_turn_end_is_never_judged_by_another_programs_pane(fleet: Fleet) -> None:
    p1, _ = two_panes(fleet)
    assert fleet.fm("crew", "add", "d1", "--pane", p1).returncode == 0
    fleet.tmux("respawn-pane", "-k", "-t", p1, "sh", "-c", BUSY)
    eventually("the busy pane", lambda: "esc to interrupt" in (fleet.backend().capture(p1) or ""))
    crew.mark_turn_ended(fleet.home, "d1", now=T0)
    source = StatusSource(fleet.home, fleet.backend())
    env = {"FM_SIGNAL_GRACE": "0", "FM_TURN_SETTLE": "0"}
    wake = source.poll(PollContext(home=fleet.home, env=env, now=T0 + 1, poll=1,
                                   triage=[].append))
    assert wake == Wake("signal", "d1.turn-ended", "signal: d1.turn-ended")
    # Nor by the pane a position names while that registration is not bound yet: the busy
    # pane at fleet:0.0 is d1's (bound) pane now, not d0's.
    (fleet.home.crew_dir / "d0.pane").write_text(position(fleet, p1) + "\n")
    crew.mark_turn_ended(fleet.home, "d0", now=T0)
    wake = StatusSource(fleet.home, fleet.backend()).poll(
        PollContext(home=fleet.home, env=env, now=T0 + 2, poll=1, triage=[].append))
    assert wake is not None and wake.reason.startswith("signal: d0.turn-ended")


def drain_and_ack(fleet: Fleet) -> None:
    drained = fleet.fm("wake", "drain", "--json")
    assert drained.returncode == 0, drained.stderr
    result = json.loads(drained.stdout)
    acked = fleet.fm("wake", "drain", "--ack-through", str(result["ack_through"]),
                     "--recovery-generation", result["generation"])
    assert acked.returncode == 0, acked.stderr


def test_the_watcher_wakes_the_primary_when_a_working_crews_pane_closes(
        fleet: Fleet, tmp_path: Path) -> None:
    spawned(fleet, "w1", "--", "task")
    eventually("the crew's first report", lambda: crew.last_line(fleet.home, "w1"))
    env = {**fleet.env, "FM_SIGNAL_GRACE": "0", "FM_POLL": "1", "FIRSTMATE_PLUGINS": "none"}
    seen: list[str] = []
    while not any(reason.startswith("signal: w1.") for reason in seen):
        # (the fresh home's first watcher, then the crew's own report: each handled in turn)
        assert len(seen) < 4, seen
        arm = spawn_arm(fleet.home, tmp_path, env=env)
        try:
            seen.append(arm.wait_reason())
            arm.wait()
        finally:
            arm.stop()
        drain_and_ack(fleet)
    arm = spawn_arm(fleet.home, tmp_path, env=env)
    try:
        assert arm.status.startswith("watcher: started"), arm.status
        fleet.tmux("kill-pane", "-t", crew.get(fleet.home, "w1").pane)
        assert arm.wait_reason() == "signal: w1.exited"  # (within one FM_POLL)
    finally:
        arm.stop()
    assert listed(fleet) == {"w1": "gone"}
