"""The supervision host, for real: real arms and watchers, a fake engine command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from firstmate.base.errors import StateError, UsageError
from firstmate.continuity import session_lock
from firstmate.host import away
from firstmate.host import config as hostconfig
from firstmate.host import supervision as host
from firstmate.store import episodes, queue, queuestatus
from firstmate.store.database import Store, kv_get, kv_set, open_store
from firstmate.store.home import Home
from firstmate.store.identity import identity_of
from firstmate.testing.procs import eventually
from watch_support import Proc, Rig, alive, attached_pid, make_rig, started_pid

#: The fake engine: the mode file says how this turn goes.
ENGINE = '''
import json, os, subprocess, sys, time
mode = open(os.environ["FAKE_ENGINE_MODE_FILE"]).read().strip()
with open(os.environ["FAKE_ENGINE_LOG"], "a") as log:
    log.write(json.dumps({"mode": mode, "actor": os.environ.get("FM_SUPERVISION_ACTOR"),
                          "generation": os.environ.get("FM_SUPERVISION_HOST_GENERATION"),
                          "prompt": sys.argv[-1]}) + "\\n")
fm = [sys.executable, "-m", "firstmate"]
if mode == "fail":
    sys.exit(3)
if mode == "hang":
    time.sleep(600)
drained = json.loads(subprocess.run(fm + ["wake", "drain", "--json"], capture_output=True,
                                    text=True, check=True).stdout)
if mode != "silent":
    seqs = ",".join(str(row["seq"]) for row in drained["rows"])
    subprocess.run(fm + ["host", "report", "handled rows " + seqs], check=True)
if mode != "leave":
    subprocess.run(fm + ["wake", "drain", "--ack-through", str(drained["ack_through"]),
                         "--recovery-generation", drained["generation"]], check=True)
'''


class HostRig:
    def __init__(self, rig: Rig, tmp: Path) -> None:
        self.rig = rig
        self.mode_file = tmp / "engine-mode"
        self.log = tmp / "engine.log"
        self.script = tmp / "engine.py"
        self.script.write_text(ENGINE)
        self.mode("ok")
        rig.env.update(FAKE_ENGINE_MODE_FILE=str(self.mode_file), FAKE_ENGINE_LOG=str(self.log))

    @property
    def home(self) -> Home:
        return self.rig.home

    def mode(self, value: str) -> None:
        self.mode_file.write_text(value + "\n")

    def enable(self, **extra: str) -> None:
        host.enable(self.home, f"{sys.executable} {self.script}", extra.get("handback"))

    def park(self, *args: str, **env: str) -> Proc:
        return self.rig.spawn("host", "park", *args, env=env)

    def turns(self) -> list[dict[str, Any]]:
        return [e for e in host.events(self.home) if e.get("type") == "turn"]

    def engine_calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def pending(self, actor: str = "main") -> int:
        db = Store(self.home)
        try:
            with db.reading() as conn:
                return queuestatus.pending_count(conn, actor)
        finally:
            db.close()

    def episode(self) -> episodes.EpisodeState:
        db = Store(self.home)
        try:
            with db.reading() as conn:
                return episodes.read(conn)
        finally:
            db.close()


def own_session_lock(home: Home, pid: int) -> None:
    ident = identity_of(pid)
    assert ident is not None
    session_lock._write(home, session_lock.SessionRecord(
        # (Held for an explicitly named process, as FM_SESSION_HOLDER_PID records it.)
        pid=pid, identity=ident.token(), harness="unknown", acquired_at=time.time()))


@pytest.fixture
def hrig(tmp_path: Path) -> Iterator[HostRig]:
    rig = make_rig(tmp_path)
    made = HostRig(rig, tmp_path)
    made.enable()
    away.turn_on(rig.home)
    # The test process is an ancestor of every host it starts: its session owns the lock.
    own_session_lock(rig.home, os.getpid())
    try:
        yield made
    finally:
        # A host cleans up its own arms on TERM; then the usual reaper.
        for proc in rig.procs:
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        for proc in rig.procs:
            try:
                proc.popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
        rig.reap()


def test_pure_verdicts() -> None:
    ok = host.EngineRun(0)
    assert host.judge_turn(ok, 1, [], 9) == (True, "handled")
    assert host.judge_turn(host.EngineRun(None, error="x: not found"), 0, [], 9) == (
        False, "engine could not start: x: not found")
    assert host.judge_turn(host.EngineRun(-15, timed_out=True), 1, [], 9) == (
        False, "engine turn timed out after 9s")
    assert host.judge_turn(host.EngineRun(3), 1, [], 9) == (False, "engine turn failed (exit 3)")
    assert host.judge_turn(ok, 0, [], 9) == (
        False, "engine turn reported no outcome (fm host report)")
    assert host.judge_turn(ok, 2, [4, 5], 9) == (
        False, "engine turn left granted row(s) 4,5 queued")


def test_config_and_claimable_rows(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    assert not host.load_config(home, {}).enabled
    # An engine written by hand (or copied, cloned, committed) is never run.
    host.config_path(home).write_text("# mine\nengine = my-engine --flag 'two words'\n"
                                      "turn_timeout = 30\nhandback = acknowledged\n")
    with pytest.raises(StateError, match="not set by fm host enable"):
        host.load_config(home, {})
    host.enable(home, "my-engine --flag 'two words'", "acknowledged")
    with host.config_path(home).open("a") as fh:
        fh.write("turn_timeout = 30\n")
    config = host.load_config(home, {})
    assert config.enabled and config.engine == ("my-engine", "--flag", "two words")
    assert (config.turn_timeout, config.handback) == (30.0, "acknowledged")
    assert host.load_config(home, {host.ENGINE_ENV: "other"}).engine == ("other",)
    host.config_path(home).write_text("enabled = no\n")
    assert not host.load_config(home, {}).enabled
    db = open_store(home)
    try:
        a = queue.append(db, "signal", "t1", "signal: t1")
        b = queue.append(db, "check", "ci", "check: ci")
        with db.reading() as conn:
            assert host.claimable_rows(conn, away=False) == [a]
            assert host.claimable_rows(conn, away=True) == [a, b]
    finally:
        db.close()


def test_report_needs_a_generation_and_text(tmp_path: Path) -> None:
    env = {**os.environ, "FM_HOME": str(tmp_path / "home")}
    Home(tmp_path / "home").ensure()
    env.pop(host.GENERATION_ENV, None)
    run = [sys.executable, "-m", "firstmate", "host", "report"]
    assert subprocess.run([*run, "did it"], env=env, capture_output=True,
                          check=False).returncode == 2
    assert subprocess.run([*run, "--generation", "g1"], env=env, capture_output=True,
                          check=False).returncode == 2
    done = subprocess.run([*run, "--generation", "g1", "--captain", "did", "it"], env=env,
                          capture_output=True, check=False)
    assert done.returncode == 0
    [event] = host.events(Home(tmp_path / "home"))
    assert (event["generation"], event["text"], event["captain"]) == ("g1", "did it", True)


def test_attended_host_is_a_pass_through_arm(hrig: HostRig) -> None:
    away.turn_off(hrig.home)
    park = hrig.park()
    started_pid(park.line())
    hrig.rig.append("check", "ci", "check: ci red")
    assert park.line() == "check: ci red"
    assert park.wait() == 0
    assert park.rest() == []
    assert hrig.turns() == [] and hrig.engine_calls() == []
    assert hrig.pending() == 1


def test_park_restart_replaces_the_running_watcher(hrig: HostRig) -> None:
    away.turn_off(hrig.home)
    arm = hrig.rig.spawn("arm")
    old = started_pid(arm.line())
    park = hrig.park("--restart")
    new = started_pid(park.line())
    assert new != old
    eventually("the old watcher to stop", lambda: not alive(old))
    hrig.rig.append("check", "ci", "check: ci red")
    assert park.line() == "check: ci red"
    assert park.wait() == 0


def test_a_home_without_the_host_parks_as_the_plain_arm(hrig: HostRig) -> None:
    assert host.disable(hrig.home)
    park = hrig.park()
    started_pid(park.line())
    hrig.rig.append("stale", "w1", "stale: w1")
    assert park.line() == "stale: w1"
    assert park.wait() == 0
    assert hrig.engine_calls() == []


def test_away_wakes_are_handled_by_the_engine_and_the_host_keeps_parking(hrig: HostRig) -> None:
    park = hrig.park()
    first = started_pid(park.line())
    for n, (kind, key) in enumerate((("check", "ci"), ("signal", "t1.status")), start=1):
        seq = hrig.rig.append(kind, key, f"{kind}: {key} needs a look")
        eventually(f"engine turn {n}", lambda n=n: len(hrig.turns()) >= n)
        turn = hrig.turns()[-1]
        assert turn["handled"] is True and turn["rows"] == [seq]
        assert turn["reasons"] == f"{kind}: {key} needs a look"
    calls = hrig.engine_calls()
    assert [c["actor"] for c in calls] == ["branch", "branch"]
    assert calls[0]["generation"] != calls[1]["generation"]
    assert "check: ci needs a look" in calls[0]["prompt"] and "fm host report" in calls[0]["prompt"]
    assert "Away contract:" in calls[0]["prompt"]
    outcomes = [e for e in host.events(hrig.home) if e.get("type") == "outcome"]
    assert [o["generation"] for o in outcomes] == [c["generation"] for c in calls]
    assert park.popen.poll() is None  # nothing reached main
    assert hrig.pending("main") == 0
    state = hrig.episode()
    assert isinstance(state, episodes.Episode) and state.status == "acked"
    watcher = eventually("the successor watcher", hrig.rig.healthy_pid)
    assert watcher != first
    # The grant was dropped after each turn.
    db = Store(hrig.home)
    with db.reading() as conn:
        assert conn.execute("SELECT count(*) FROM branch_grant").fetchone()[0] == 0
    db.close()
    # TERM (the hook timeout): the host stops its arms and exits 143.
    park.popen.send_signal(signal.SIGTERM)
    assert park.wait() == 143
    assert park.rest() == ["supervision-host: interrupted by SIGTERM"]
    eventually("the host's watcher to stop", lambda: not alive(watcher))


@pytest.mark.parametrize(("mode", "env", "why", "queued"), [
    ("fail", {}, "supervision-host: engine turn failed (exit 3)", 1),
    # It acknowledged its row but reported nothing: main is told, nothing is left to drain.
    ("silent", {}, "supervision-host: engine turn reported no outcome (fm host report)", 0),
    ("leave", {}, "supervision-host: engine turn left granted row(s) {seq} queued", 1),
    ("hang", {"FM_SUPERVISION_HOST_TURN_TIMEOUT": "2"},
     "supervision-host: engine turn timed out after 2s", 1),
    ("missing", {}, "supervision-host: engine could not start: ", 1),
])
def test_any_failure_hands_the_wake_back_to_main(hrig: HostRig, mode: str,
                                                 env: dict[str, str], why: str,
                                                 queued: int) -> None:
    if mode == "missing":
        host.enable(hrig.home, str(hrig.rig.tmp / "no-such-engine"))
    hrig.mode(mode)
    park = hrig.park(**env)
    started_pid(park.line())
    seq = hrig.rig.append("check", "ci", "check: ci red")
    assert park.line() == "check: ci red"
    line = park.line()
    assert line.startswith(why.format(seq=seq)), line
    assert park.wait() == 0
    assert park.rest() == []
    # The wake stays durable for main; the branch holds nothing; the successor was stopped.
    assert hrig.pending("main") == queued and hrig.pending("branch") == 0
    [event] = [e for e in host.events(hrig.home) if e.get("type") == "handback"]
    assert event["why"] == line[len("supervision-host: "):]
    eventually("the successor cycle to stop", lambda: hrig.rig.healthy_pid() is None)


def test_the_park_stops_at_a_cycle_boundary(hrig: HostRig) -> None:
    park = hrig.park(FM_SUPERVISION_HOST_BOUNDARY="3")
    watcher = started_pid(park.line())
    assert park.line(deadline=60) == "supervision-host: cycle boundary"
    assert park.wait() == 0
    eventually("the watcher to be stopped at the boundary", lambda: not alive(watcher))


def test_no_engine_turn_that_could_outlast_the_boundary(hrig: HostRig) -> None:
    park = hrig.park(FM_SUPERVISION_HOST_BOUNDARY="600",
                     FM_SUPERVISION_HOST_TURN_TIMEOUT="900")
    started_pid(park.line())
    hrig.rig.append("check", "ci", "check: ci red")
    assert park.line() == "check: ci red"
    assert park.line() == ("supervision-host: the cycle boundary is too close for an engine "
                           "turn")
    assert park.wait() == 0
    assert hrig.engine_calls() == []


def test_a_host_without_the_session_lock_stands_down(hrig: HostRig) -> None:
    other = hrig.rig.sleeper()
    own_session_lock(hrig.home, other.pid)
    park = hrig.park()
    assert park.rest() == []
    assert park.wait() == 0
    assert "supervision-host: standing down - session lock is held by live harness pid" in \
        park.stderr()
    assert hrig.rig.healthy_pid() is None


def test_a_row_left_for_main_becomes_a_recoverable_episode(hrig: HostRig) -> None:
    left = hrig.rig.append("signal", "t9.status", "signal: t9 done")
    drained = hrig.rig.fm("wake", "drain", "--json")  # main claims it and does not acknowledge
    assert json.loads(drained.stdout)["ack_through"] == left
    park = hrig.park()
    started_pid(park.line())
    seq = hrig.rig.append("check", "ci", "check: ci red")
    eventually("the engine turn", lambda: hrig.turns())
    assert hrig.turns()[0]["handled"] is True and hrig.turns()[0]["rows"] == [seq]
    # The turn is recorded before the host settles the handoff: wait for the settlement.
    eventually("the host to settle the handoff",
               lambda: any("settled handoff" in line for line in host.host_log(hrig.home).lines()))
    state = hrig.episode()
    assert isinstance(state, episodes.Episode), state
    assert (state.status, state.kind) == ("pending", "downtime")
    assert hrig.pending("main") == 1
    assert park.popen.poll() is None


#: The retry is never due on its own during a test: the test makes it due (time passing).
SLOW_RETRY = {host.RETRY_ENV: "3600"}


def handback_record(home: Home) -> dict[str, Any] | None:
    db = Store(home)
    try:
        with db.reading() as conn:
            raw = kv_get(conn, host.HANDBACK_KEY)
    finally:
        db.close()
    return None if raw is None else dict(json.loads(raw))


def make_retry_due(home: Home) -> None:
    """Stand-in for the backoff running out: the durable next delivery time is now."""
    db = Store(home)
    try:
        with db.transaction(timeout=10.0) as conn:
            rec = json.loads(kv_get(conn, host.HANDBACK_KEY) or "null")
            assert isinstance(rec, dict), rec
            rec["next_at"] = 0
            kv_set(conn, host.HANDBACK_KEY, json.dumps(rec))
    finally:
        db.close()


def queued(home: Home) -> list[int]:
    db = Store(home)
    try:
        with db.reading() as conn:
            return [int(r[0]) for r in conn.execute("SELECT seq FROM wakes ORDER BY seq")]
    finally:
        db.close()


def test_retry_delay_backs_off_to_its_cap() -> None:
    assert [host.retry_delay(n, 10, 45) for n in (0, 1, 2, 3, 4, 99)] == [10, 10, 20, 40, 45, 45]
    assert host.retry_delay(5, 30, 1) == 30  # a cap below the base is the base
    config = host.HostConfig()
    assert (config.retries, config.retry, config.retry_max) == (0, 120.0, 1800.0)


def test_retry_knobs_come_from_the_environment(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    host.config_path(home).write_text("handback = acknowledged\n")
    config = host.load_config(home, {host.RETRY_ENV: "2.5", host.RETRY_MAX_ENV: "9",
                                     host.RETRIES_ENV: "4"})
    assert (config.retry, config.retry_max, config.retries) == (2.5, 9.0, 4)
    junk = host.load_config(home, {host.RETRY_ENV: "-1", host.RETRY_MAX_ENV: "x"})
    assert (junk.retry, junk.retry_max) == (hostconfig.DEFAULT_RETRY, hostconfig.DEFAULT_RETRY_MAX)


def test_an_acknowledged_hand_back_is_redelivered_until_main_acknowledges(
        hrig: HostRig) -> None:
    hrig.enable(handback="acknowledged")
    hrig.mode("fail")
    park = hrig.park(**SLOW_RETRY)
    started_pid(park.line())
    seq = hrig.rig.append("check", "ci", "check: ci red")
    assert park.line() == "check: ci red"
    assert park.line() == "supervision-host: engine turn failed (exit 3)"
    assert park.wait() == 0
    successor = eventually("the successor left running", hrig.rig.healthy_pid)
    record = handback_record(hrig.home)
    assert record is not None and (record["seqs"], record["deliveries"]) == ([seq], 1)
    # The harness parks again at once and the continuation is lost: the retry is not due, so
    # this park watches the fleet (on the kept successor) and re-delivers when it falls due.
    waiting = hrig.park(**SLOW_RETRY)
    assert attached_pid(waiting.line()) == successor
    make_retry_due(hrig.home)
    assert waiting.line() == "check: ci red"
    assert waiting.line().startswith(
        f"supervision-host: handed-back wake still unacknowledged (rows {seq}, delivery 2)")
    assert waiting.wait() == 0
    assert waiting.rest() == []
    assert hrig.rig.healthy_pid() == successor
    # A park that starts with a delivery already due re-delivers at once and starts no cycle.
    make_retry_due(hrig.home)
    quick = {host.RETRY_ENV: "1", host.RETRY_MAX_ENV: "1"}
    again = hrig.park(**quick)
    assert again.line() == "check: ci red"
    assert again.line().startswith(
        f"supervision-host: handed-back wake still unacknowledged (rows {seq}, delivery 3)")
    assert again.wait() == 0
    assert hrig.rig.healthy_pid() == successor
    # The backoff for real (1 s): the next delivery comes by itself, whether this park starts
    # before it falls due (it parks first) or after (at once).
    timed = hrig.park(**quick)
    first = timed.line()
    if first.startswith("watcher: attached"):
        assert attached_pid(first) == successor
        first = timed.line()
    assert first == "check: ci red"
    assert timed.line().startswith(
        f"supervision-host: handed-back wake still unacknowledged (rows {seq}, delivery 4)")
    assert timed.wait() == 0
    retries = [e for e in host.events(hrig.home) if e.get("type") == "handback-retry"]
    assert [(e["rows"], e["delivery"]) for e in retries] == [([seq], n) for n in (2, 3, 4)]
    drained = json.loads(hrig.rig.fm("wake", "drain", "--json").stdout)
    acked = hrig.rig.fm("wake", "drain", "--ack-through", str(drained["ack_through"]),
                        "--recovery-generation", drained["generation"])
    assert acked.returncode == 0, acked.stderr
    third = hrig.park(**SLOW_RETRY)
    assert attached_pid(third.line()) == successor
    assert handback_record(hrig.home) is None
    assert any("retry stopped" in x for x in host.host_log(hrig.home).lines())


def test_only_main_acknowledging_the_handed_back_row_stops_the_retry(hrig: HostRig) -> None:
    hrig.enable(handback="acknowledged")
    # An older row main holds: acknowledging it is not acknowledging the hand-back.
    older = hrig.rig.append("signal", "t0.status", "signal: t0 done")
    drained = json.loads(hrig.rig.fm("wake", "drain", "--json").stdout)
    assert drained["ack_through"] == older
    hrig.mode("fail")
    park = hrig.park(**SLOW_RETRY)
    started_pid(park.line())
    seq = hrig.rig.append("check", "ci", "check: ci red")
    assert park.line() == "check: ci red"
    assert park.line() == "supervision-host: engine turn failed (exit 3)"
    assert park.wait() == 0
    successor = eventually("the successor left running", hrig.rig.healthy_pid)
    record = handback_record(hrig.home)
    assert record is not None and record["seqs"] == [seq]
    waiting = hrig.park(**SLOW_RETRY)
    assert attached_pid(waiting.line()) == successor
    # The unrelated acknowledgement consumes main's older row only.
    hrig.rig.fm("wake", "drain", "--ack-through", str(older), "--recovery-generation",
                drained["generation"])
    assert queued(hrig.home) == [seq]
    make_retry_due(hrig.home)
    assert waiting.line() == "check: ci red"
    assert waiting.line().startswith(
        f"supervision-host: handed-back wake still unacknowledged (rows {seq}, delivery 2)")
    assert waiting.wait() == 0
    # Parked again; main acknowledges that row while the host waits: the retry stops and the
    # park goes on watching.
    parked = hrig.park(**SLOW_RETRY)
    assert attached_pid(parked.line()) == successor
    mine = json.loads(hrig.rig.fm("wake", "drain", "--json").stdout)
    assert [row["seq"] for row in mine["rows"]] == [seq]
    acked = hrig.rig.fm("wake", "drain", "--ack-through", str(mine["ack_through"]),
                        "--recovery-generation", mine["generation"])
    assert acked.returncode == 0, acked.stderr
    eventually("the parked host to stop retrying", lambda: handback_record(hrig.home) is None)
    eventually("the log line",
               lambda: any("retry stopped" in x for x in host.host_log(hrig.home).lines()))
    assert parked.popen.poll() is None
    # A new close while parked is handled as usual.
    hrig.mode("ok")
    new = hrig.rig.append("signal", "t1.status", "signal: t1 done")
    eventually("the new close to be handled",
               lambda: any(t["rows"] == [new] and t["handled"] for t in hrig.turns()))
    assert parked.popen.poll() is None


def test_the_default_engine_comes_from_a_plugin_or_the_error_names_the_fix() -> None:
    # No plugin loaded: no default engine, and parking says how to set one.
    assert host.default_engine({"FIRSTMATE_PLUGINS": "no-such-plugin"}) == host.NO_ENGINE
    with pytest.raises(UsageError, match="set FM_SUPERVISION_HOST_ENGINE") as caught:
        host.require_engine(host.HostConfig(enabled=True))
    assert "\n" not in caught.value.message
    assert host.require_engine(host.HostConfig(enabled=True, engine=("e",))) == ("e",)
