"""Away mode: the record and its contract, check-row grants, the away owner, the return brief."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.base.errors import ConflictError
from firstmate.host import away
from firstmate.host import supervision as host
from firstmate.store import crew, deliveries, grants
from firstmate.store.database import open_store
from firstmate.store.home import Home
from wakeq_support import child_env, finish, live_owner, read_line, set_episode

CORE = str(Path(__file__).resolve().parents[2] / "core")


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home").ensure()


def fm(home: Home, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "firstmate", *args], capture_output=True,
                          text=True, timeout=60, check=False, env=child_env(home, **env))


def test_on_off_status_and_the_record(home: Home) -> None:
    assert fm(home, "away", "status").stdout == "away: off\n"
    for key in ("a", "b"):
        assert fm(home, "wake", "append", "signal", key, f"signal: {key}").returncode == 0
    on = fm(home, "away", "on", "--note", "back", "after", "lunch")
    assert on.returncode == 0 and on.stdout.startswith("away: on")
    st = os.lstat(home.away_record)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    record = json.loads(home.away_record.read_text())
    assert record["posture"] == "away" and record["since_seq"] == 2
    assert record["note"] == "back after lunch"
    assert any("check rows" in rule for rule in record["contract"])
    assert fm(home, "away", "on").stdout == "away: already on\n"
    assert json.loads(home.away_record.read_text())["since"] == record["since"]
    status = json.loads(fm(home, "away", "status", "--json").stdout)
    assert status["away"] is True and status["record"]["note"] == "back after lunch"
    assert status["owner"] == {"live": False, "pid": None}
    text = fm(home, "away", "status").stdout
    assert "away owner: none (wakes go to main)" in text and "contract: " in text
    off = fm(home, "away", "off")
    assert off.returncode == 0 and off.stdout.startswith("away: off")
    assert not os.path.lexists(home.away_record)
    assert fm(home, "away", "off").stdout == "away: already off\n"
    period = away.last_period(home)
    assert period is not None and period.until is not None and period.since_seq == 2


def test_bad_usage_is_exit_2(home: Home) -> None:
    assert fm(home, "away", "sideways").returncode == 2
    assert fm(home, "away", "status", "--yaml").returncode == 2


def test_an_unreadable_record_still_means_away(home: Home) -> None:
    home.away_record.write_text("not json\n")
    record = away.read_record(home)
    assert record is not None and not record.valid
    assert "record unreadable" in fm(home, "away", "status").stdout
    # `on` repairs it, `off` clears it.
    assert fm(home, "away", "on").stdout.startswith("away: on")
    assert away.read_record(home) is not None and away.read_record(home).valid  # type: ignore[union-attr]


def test_check_rows_are_grantable_only_while_away(home: Home) -> None:
    db = open_store(home)
    owner = live_owner(home)
    try:
        from firstmate.store import queue

        seq = queue.append(db, "check", "ci", "check: ci red")
        grants.activate(db, owner.pid, "g1")
        with pytest.raises(ConflictError, match="check rows"):
            grants.publish(db, "g1", [seq])
        away.turn_on(home)
        assert grants.publish(db, "g1", [seq]) == (seq,)
    finally:
        finish(owner)
        db.close()


# --- the away owner ------------------------------------------------------------------------------


@pytest.fixture
def needy(home: Home, tmp_path: Path) -> Home:
    (home.state / "sources").mkdir()
    (home.state / "sources" / "poll.source").write_text("poller\n")
    (tmp_path / "project" / ".git").mkdir(parents=True)
    return home


def guard(home: Home, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "firstmate", "turnend-guard", "--harness", "codex"],
        input=json.dumps({"session_id": "s", "cwd": str(tmp_path / "project")}),
        capture_output=True, text=True, timeout=60, check=False, env=child_env(home, **env))


@pytest.fixture
def parked(needy: Home) -> Iterator[subprocess.Popen[bytes]]:
    """A live process holding the host lock, standing in for a parked supervision host."""
    code = ("import sys; from firstmate.host.away import host_lock; from firstmate.store.home import Home;"
            "from pathlib import Path; lock = host_lock(Home(Path(sys.argv[1])));"
            "lock.acquire(); print('ready', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(needy.root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=child_env(needy))
    assert read_line(proc) == "ready"
    try:
        yield proc
    finally:
        finish(proc)


def test_the_away_owner_with_a_fresh_beacon_satisfies_the_turn_end_guard(
        needy: Home, parked: subprocess.Popen[bytes], tmp_path: Path) -> None:
    pid, live = away.away_owner(needy)
    assert (pid, live) == (parked.pid, True)
    needy.beacon.write_text("")
    assert guard(needy, tmp_path).returncode == 2  # attended: the owner proves nothing
    away.turn_on(needy)
    assert guard(needy, tmp_path).returncode == 0
    # The away grace follows the poll: max(FM_GUARD_GRACE, FM_POLL + 60).
    old = time.time() - 100
    os.utime(needy.beacon, (old, old))
    assert guard(needy, tmp_path, FM_GUARD_GRACE="2", FM_POLL="100").returncode == 0
    assert guard(needy, tmp_path, FM_GUARD_GRACE="2", FM_POLL="10").returncode == 2
    facts = away.away_facts(needy, {"FM_GUARD_GRACE": "2", "FM_POLL": "10"})
    assert facts.on and facts.owner_live and not facts.supervising


def test_away_without_a_live_owner_still_blocks(needy: Home, tmp_path: Path) -> None:
    away.turn_on(needy)
    needy.beacon.write_text("")
    done = guard(needy, tmp_path)
    assert done.returncode == 2
    assert "no supervision host is parked on this home" in done.stderr


# --- the return brief ------------------------------------------------------------------------------


def test_brief_before_any_away_period(home: Home) -> None:
    assert fm(home, "away", "brief").stdout.startswith(
        "AWAY RETURN BRIEF: away mode has not been used")


def test_brief_lists_what_happened_and_treats_handling_as_in_progress(home: Home) -> None:
    host.record_event(home, "outcome", generation="g0", text="before away: not listed",
                      at=time.time() - 100)
    away.turn_on(home, "travelling", now=time.time() - 5)
    host.record_event(home, "outcome", generation="g1", text="ci fixed on t1", captain=False)
    host.record_event(home, "outcome", generation="g1", text="t2 wants a db choice",
                      captain=True)
    host.record_event(home, "turn", generation="g1", rows=[1], reasons="check: ci red",
                      handled=True, why="handled", outcomes=2, exit=0)
    host.record_event(home, "handback", reasons="stale: t3", why="engine turn failed (exit 3)")
    db = open_store(home)
    try:
        deliveries.record(db, 4242, "4242:1.00:abc", "check: ci red")
        from firstmate.store import queue

        queue.append(db, "stale", "t3", "stale: t3")
    finally:
        db.close()
    crew.add(home, "t2", "%2")
    crew.append_status(home, "t2", "needs-decision: key=db postgres or sqlite?")
    set_episode(home, "pending", "handling", "gen.1")
    data = json.loads(fm(home, "away", "brief", "--json").stdout)
    assert data["away"]["note"] == "travelling" and data["away"]["until"] is None
    assert [o["text"] for o in data["outcomes"]] == ["ci fixed on t1", "t2 wants a db choice"]
    assert len(data["handled"]) == 1 and data["handled"][0]["reasons"] == "check: ci red"
    assert data["handed_back"][0]["why"] == "engine turn failed (exit 3)"
    assert data["deliveries"] == ["check: ci red"]
    assert data["in_progress"] == "pending:handling:gen.1"
    assert not any("downtime" in gap for gap in data["gaps"])
    assert data["queued_main"] == 1
    assert data["open_decisions"] == ["t2 [key=db] postgres or sqlite?"]
    text = fm(home, "away", "brief").stdout
    assert "IN PROGRESS: a wake is being handled right now (episode pending:handling:gen.1)" in text
    assert "[captain] t2 wants a db choice" in text
    assert "HANDED BACK TO MAIN: 1 wake(s)" in text
    assert "before away" not in text


def test_brief_reports_open_downtime_as_a_gap_after_return(home: Home) -> None:
    away.turn_on(home, now=time.time() - 60)
    set_episode(home, "announced", "downtime", "gen.2")
    away.turn_off(home)
    host.record_event(home, "outcome", generation="g9", text="after return: not listed")
    data = json.loads(fm(home, "away", "brief", "--json").stdout)
    assert data["away"]["until"] is not None
    assert data["in_progress"] is None
    assert "open downtime episode announced:downtime:gen.2" in data["gaps"]
    assert data["outcomes"] == []
    text = fm(home, "away", "brief").stdout
    assert "back at" in text and "GAPS: 1" in text
    assert "open downtime episode announced:downtime:gen.2" in text
