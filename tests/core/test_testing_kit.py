"""The contract kit's fixtures: a real arm, a fake harness endpoint."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import psutil
import pytest
from firstmate.store.home import Home
from firstmate.testing import (
    DEADLINE,
    FakeHarness,
    SpawnedArm,
    eventually,
    fm_command,
    json_contains,
    sample_call,
    spawn_arm,
)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_spawned_arm_starts_a_watcher_and_relays_its_reason(spawned_arm: SpawnedArm) -> None:
    assert spawned_arm.status.startswith("watcher: started pid="), spawned_arm.stderr()
    done = subprocess.run(fm_command("wake", "append", "stale", "w1", "stale: w1"),
                          env=dict(spawned_arm.env), capture_output=True, text=True,
                          timeout=DEADLINE, check=False)
    assert done.returncode == 0, done.stderr
    assert spawned_arm.wait_reason() == "stale: w1"
    assert spawned_arm.wait() == 0


def test_stopping_a_spawned_arm_leaves_no_watcher(fm_home: Home, tmp_path: Path) -> None:
    arm = spawn_arm(fm_home, tmp_path)
    watcher = int(arm.status.split("pid=", 1)[1].split()[0])
    arm.stop()
    assert arm.popen.poll() is not None
    eventually(f"watcher {watcher} to end with the arm's teardown", lambda: _gone(watcher),
               DEADLINE)


def test_fake_harness_records_deliveries_from_any_thread(fake_harness: FakeHarness) -> None:
    threading.Thread(target=fake_harness, args=("FIRSTMATE_OP: stale: w1",),
                     kwargs={"deliverAs": "followUp"}).start()
    assert fake_harness("second") is True
    got = fake_harness.wait_for(2)
    assert sorted(d.text for d in got) == ["FIRSTMATE_OP: stale: w1", "second"]
    assert {"deliverAs": "followUp"} in [dict(d.meta) for d in got]
    refusing = FakeHarness(accept=False)
    assert refusing("x") is False and refusing.texts == ["x"]


def test_fake_harness_wait_fails_when_nothing_arrives() -> None:
    with pytest.raises(pytest.fail.Exception):
        FakeHarness().wait_for(1, deadline=0.01)


def test_eventually_answers_the_first_truthy_value_and_names_what_it_waited_for() -> None:
    answers = iter([None, "", "ready"])
    assert eventually("the third answer", lambda: next(answers), DEADLINE, interval=0) == "ready"
    with pytest.raises(pytest.fail.Exception) as failed:
        eventually("a pane to draw", lambda: "", 0.01, interval=0, diag=lambda: "it shows: $ _")
    assert str(failed.value) == "timed out after 0.01s waiting for a pane to draw\nit shows: $ _"


def test_a_declared_sample_call_gets_its_event_name() -> None:
    from firstmate.plugin.harness import HarnessInfo
    from firstmate.testing import sample_of

    info = HarnessInfo(name="acme", display_name="Acme", family="hook", rearm_owner="hook",
                       wake_channel="x", sample_payload={"event": "{Event}", "kind": "{event}",
                                                         "n": 1},
                       sample_env={"ACME_EVENT": "{Event}"})
    payload, env = sample_of(info, "stop-failure") or ({}, {})
    assert payload == {"event": "StopFailure", "kind": "stopFailure", "n": 1}
    assert env == {"ACME_EVENT": "StopFailure"}
    bare = HarnessInfo(name="b", display_name="B", family="in-process", rearm_owner="extension",
                       wake_channel="x")
    assert sample_of(bare, "stop") is None
    # Core knows no harness: a harness with no plugin here has no sample.
    assert sample_call("no-such-harness", "stop") is None


def test_json_contains() -> None:
    assert json_contains({"a": [1, {"b": 2}, 3], "c": 0}, {"a": [{"b": 2}, 3]})
    assert not json_contains({"a": [3, 1]}, {"a": [1, 3]})
    assert not json_contains({"a": 1}, {"a": 1, "b": None})
