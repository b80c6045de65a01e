"""The claim-ledger park (ClaimLedgerPark), run by core for a fake harness whose background stop
hook wakes the session on exit 2: its gates, claims, failure episodes and pacing as pure
decisions, then for real (one claim per turn end, the wake once a successor watches, the
notice of a hook its harness ended)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeplugin_support import FakeSite, fake_site  # noqa: F401
from firstmate.continuity import claimledger
from firstmate.plugin.manager import load_harness
from firstmate.rearm import claimpark
from firstmate.rearm.claimgates import GateFacts, decide_gates
from firstmate.rearm.claimnotice import Notice, next_notice
from firstmate.store.database import kv_set, open_store
from firstmate.store.home import Home
from firstmate.testing import exec_identity, rearm
from firstmate.testing.procs import eventually

# --- pure decisions ----------------------------------------------------------------------------


@pytest.mark.parametrize(("facts", "verdict"), [
    (GateFacts(False, "owned", False, True), "out-of-scope"),
    (GateFacts(False, "reclaimable", True, True), "out-of-scope"),
    (GateFacts(True, "other-live", False, True), "not-owner"),
    (GateFacts(True, "unreadable", False, True), "not-owner"),
    (GateFacts(True, "owned", True, True), "away"),
    (GateFacts(True, "reclaimable", True, True), "away"),  # no reclaim before the away gate
    (GateFacts(True, "reclaimable", False, False), "no-need"),  # nor before the need gate
    (GateFacts(True, "owned", False, False), "no-need"),
    (GateFacts(True, "owned", False, True), "proceed"),
    (GateFacts(True, "reclaimable", False, True), "reclaim"),
    (GateFacts(True, "absent", False, True), "no-lock"),  # nothing stale to recover
])
def test_gates_in_order(facts: GateFacts, verdict: str) -> None:
    assert decide_gates(facts) == verdict


def test_failure_episode_progression() -> None:
    assert next_notice(notified=False, alarmed=False, sent=0, budget=3) == Notice("failed")
    assert next_notice(notified=True, alarmed=False, sent=1, budget=3) == Notice("still")
    assert next_notice(notified=True, alarmed=False, sent=2, budget=3) == Notice("still", True)
    assert next_notice(notified=True, alarmed=True, sent=3, budget=3) == Notice("suppressed")
    # The guard raised the alarm on its own: suppressed too.
    assert next_notice(notified=False, alarmed=True, sent=0, budget=3) == Notice("suppressed")
    # A reset episode (notice consumed marker gone) starts with FAILED whatever the count says.
    assert next_notice(notified=False, alarmed=False, sent=7, budget=3) == Notice("failed")
    assert next_notice(notified=False, alarmed=False, sent=0, budget=1) == Notice("failed", True)


def test_pacing_waits_then_rechecks() -> None:
    slept: list[float] = []
    assert claimpark.pace(0.0, slept.append, lambda: "away") is None and slept == []
    assert claimpark.pace(2.5, slept.append, lambda: "away") == "away" and slept == [2.5]
    assert claimpark.pace(1.0, slept.append, lambda: None) is None and slept == [2.5, 1.0]


def test_cooldown_left_counts_from_the_last_paced_claim(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    assert claimpark.cooldown_left(home, "acme", 5.0) == 0.0
    db = open_store(home)
    try:
        with db.transaction() as conn:
            kv_set(conn, claimledger.key("acme", "stopfailure_at"), f"{time.time() - 1:.3f}")
    finally:
        db.close()
    assert 3.5 < claimpark.cooldown_left(home, "acme", 5.0) <= 4.0
    assert claimpark.cooldown_left(home, "other", 5.0) == 0.0  # each harness paces its own


def test_claim_open_rules() -> None:
    me = claimledger.Claim(1, 1, "bad", "arming", time.time(), session_pid=10)
    assert not claimpark.claim_open(None, 10, now=time.time(), beacon_age=1.0, grace=300.0)
    assert not claimpark.claim_open(me, 11, now=time.time(), beacon_age=1.0, grace=300.0)
    # A bad identity token is never a live owner.
    assert not claimpark.claim_open(me, 10, now=time.time(), beacon_age=1.0, grace=300.0)


# --- for real, with a fake harness ---------------------------------------------------------------

STRATEGY = ('ClaimLedgerPark(paced_events=("stop-failure",), attempts_env="FM_FAKE_ATTEMPTS", '
            'cooldown_env="FM_FAKE_COOLDOWN_MS")')


@pytest.fixture
def rig(fake_site: FakeSite, tmp_path: Path) -> Iterator[rearm.ContinuityRig]:  # noqa: F811
    fake_site.hook_plugin("fakeclaim", STRATEGY)
    with rearm.continuity_rig("fakeclaim", tmp_path, {"FM_FAKE_COOLDOWN_MS": "0"}) as made:
        yield made


def ledger(rig: rearm.ContinuityRig) -> claimledger.Claim | None:
    db = open_store(rig.home)
    try:
        with db.reading() as conn:
            return claimledger.read(conn, "fakeclaim")
    finally:
        db.close()


def take_lock(rig: rearm.ContinuityRig) -> None:
    done = rig.fm("lock", "acquire")  # as the harness's session-start hook would
    assert done.returncode == 0, done.stderr


def start(rig: rearm.ContinuityRig, event: str = "stop") -> subprocess.Popen[str]:
    return rig.spawn(rig_hook(event), stdin=json.dumps({"fake_session": "f", "event": event}))


def rig_hook(event: str) -> list[str]:
    return [sys.executable, "-m", "firstmate", "hook", "fakeclaim", event]


def test_one_claim_per_turn_end_and_each_wake_once_with_a_successor(
        rig: rearm.ContinuityRig) -> None:
    take_lock(rig)
    info = load_harness("fakeclaim", rig.env).harness("fakeclaim")
    rearm.drive_hook(rig, info)  # a doubled turn end runs two hooks at once: one claims
    entry = ledger(rig)
    # One claim per turn end, the one that met a queued wake included.
    assert entry is not None and entry.outcome == "wake"
    assert entry.epoch == len(rearm.TURN_ENDS)


def test_without_the_session_lock_the_turn_end_is_inert(rig: rearm.ContinuityRig) -> None:
    for event in ("stop", "stop-failure"):
        done = rig.fm("hook", "fakeclaim", event, stdin=json.dumps({"fake_session": "f"}))
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert ledger(rig) is None and rig.watcher() is None


def test_a_hook_its_harness_ends_says_so_and_records_the_failure(
        rig: rearm.ContinuityRig) -> None:
    take_lock(rig)
    hook = start(rig)
    rig.parked(hook, "fm hook fakeclaim stop")
    hook.send_signal(signal.SIGTERM)
    out, err = hook.communicate(timeout=60)
    assert hook.returncode == 2 and out == ""
    assert "INTERRUPTED by SIGTERM" in err and "Fake fakeclaim ended the stop hook" in err
    entry = ledger(rig)
    assert entry is not None and entry.outcome == "failed"


def test_an_open_claim_of_this_session_admits_no_second_hook(rig: rearm.ContinuityRig) -> None:
    take_lock(rig)
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        token = exec_identity(owner).token()
        db = open_store(rig.home)
        try:
            with db.transaction() as conn:
                claimledger.claim_next(conn, "fakeclaim", owner.pid, token,
                                       session_pid=int(rig.env["FM_SESSION_HOLDER_PID"]))
        finally:
            db.close()
        done = rig.fm("hook", "fakeclaim", "stop", stdin=json.dumps({"fake_session": "f"}))
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
        entry = ledger(rig)
        assert entry is not None and entry.epoch == 1  # no second claim was taken
    finally:
        owner.kill()
        owner.wait()


def test_a_paced_turn_end_waits_out_its_cooldown_then_parks(rig: rearm.ContinuityRig) -> None:
    take_lock(rig)
    db = open_store(rig.home)
    try:
        with db.transaction() as conn:
            kv_set(conn, claimledger.key("fakeclaim", "stopfailure_at"), f"{time.time():.3f}")
    finally:
        db.close()
    started = time.monotonic()
    hook = rig.spawn(rig_hook("stop-failure"), stdin=json.dumps({"fake_session": "f"}),
                     env={**rig.env, "FM_FAKE_COOLDOWN_MS": "1500"})
    eventually("the paced hook to park", lambda: rig.linked(hook))
    assert time.monotonic() - started >= 1.4  # it waited out the cooldown first
    marker = rig.wake()
    _out, err = hook.communicate(timeout=60)
    assert hook.returncode == 2 and marker in err
