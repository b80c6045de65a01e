"""The parked stop hook (ParkedStop), run by core for a fake harness: it parks, answers with the
wake once a successor watches, stands aside where nothing is watched, reminds before parking
when asked, and bounds its chain. Real arms, watchers and store; the harness is a fake."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeplugin_support import FakeSite, fake_site  # noqa: F401
from firstmate.plugin.manager import load_harness
from firstmate.store.locks import FileLock
from firstmate.testing import fm_command, rearm

FOLLOW_UP = ('ParkedStop(reply=HookReply.json("followup_message", allow_stdout="{}", '
             'one_line=True), chain=StopChain.knobs("FM_FAKE_STOP"), drain_first=True, '
             'status_key="status")')


@pytest.fixture
def rig(fake_site: FakeSite, tmp_path: Path) -> Iterator[rearm.ContinuityRig]:  # noqa: F811
    fake_site.hook_plugin("fakepark", "ParkedStop(park_seconds=600)")
    fake_site.hook_plugin("fakefollow", FOLLOW_UP)
    with rearm.continuity_rig("fakepark", tmp_path,
                              {"FIRSTMATE_PLUGINS": "fakepark,fakefollow"}) as made:
        yield made


def hook(rig: rearm.ContinuityRig, harness: str, **payload: object
         ) -> subprocess.CompletedProcess[str]:
    return rig.fm("hook", harness, "stop", stdin=json.dumps({"fake_session": "f", **payload}))


def test_it_parks_and_answers_with_each_wake_once_a_successor_watches(
        rig: rearm.ContinuityRig) -> None:
    info = load_harness("fakepark", rig.env).harness("fakepark")
    rearm.drive_hook(rig, info)  # a wake per parked turn end, one with two hooks at once
    assert len(rig.delivered) == len([calls for calls in rearm.TURN_ENDS if calls])
    assert all(text.startswith("FIRSTMATE_OP:") for text in rig.delivered)


def test_it_stands_aside_where_nothing_is_watched(rig: rearm.ContinuityRig,
                                                  tmp_path: Path) -> None:
    crew = rig.home.state / "crew"
    for path in crew.iterdir():
        path.unlink()  # no crew registered: nothing to supervise
    assert (hook(rig, "fakepark").returncode, hook(rig, "fakepark").stderr) == (0, "")
    done = hook(rig, "fakefollow")
    assert (done.returncode, done.stdout) == (0, "{}\n")
    assert rig.watcher() is None


def test_a_turn_that_did_not_complete_never_parks(rig: rearm.ContinuityRig) -> None:
    done = hook(rig, "fakefollow", status="aborted")
    assert (done.returncode, done.stdout, done.stderr) == (0, "{}\n", "")
    assert rig.watcher() is None


def test_queued_wakes_get_a_drain_reminder_bounded_by_the_chain(rig: rearm.ContinuityRig) -> None:
    queued = rig.fm("wake", "append", "signal", "builder", "signal: builder done: QUEUED")
    assert queued.returncode == 0, queued.stderr  # no watcher: the row waits in the queue
    for _ in range(3):  # the chain's block budget (3)
        done = hook(rig, "fakefollow", loop_count=1)
        message = json.loads(done.stdout)["followup_message"]
        assert done.returncode == 0 and "1 queued wake" in message and "fm wake drain" in message
    spent = hook(rig, "fakefollow", loop_count=1)
    assert (spent.returncode, spent.stdout) == (0, "{}\n")
    assert "to drain 1 queued wake" in spent.stderr and spent.stderr.startswith("firstmate:")
    # A stop after a real user message starts the chain afresh.
    again = hook(rig, "fakefollow", loop_count=0)
    assert "followup_message" in json.loads(again.stdout)
    assert rig.watcher() is None  # a reminder never parks


def test_a_failing_arm_is_answered_with_its_failure_not_silence(
        rig: rearm.ContinuityRig) -> None:
    blocker = FileLock(rig.home.lock_path("watch"), "test-blocker", rig.home.root)
    blocker.acquire(0)  # a live non-watcher holds the watcher singleton: every arm fails
    try:
        done = rig.fm("hook", "fakepark", "stop", stdin=json.dumps({"fake_session": "f"}),
                      env={**rig.env, "FM_ARM_CONFIRM_TIMEOUT": "2",
                           "FM_WATCHER_STARTUP_LOCK_BOUND": "1"})
    finally:
        blocker.release()
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("FIRSTMATE_OP:") and "watcher: FAILED" in done.stderr


def test_another_harness_payload_is_not_answered(rig: rearm.ContinuityRig) -> None:
    done = rig.fm("hook", "fakepark", "stop", stdin=json.dumps({"session_id": "someone else"}))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert rig.watcher() is None
    assert subprocess.run(fm_command("arm", "--stop"), env=rig.env, capture_output=True,
                          check=False).returncode == 0
