"""Downtime is visible as soon as anyone can prove the watcher gone, not at the next start."""

from __future__ import annotations

import json
import os
import signal

from firstmate.store import episodes, stopping
from firstmate.store.database import kv_get, open_store
from firstmate.store.downtime import OPEN_KEY, publish_if_gone
from firstmate.store.identity import identity_of
from firstmate.testing.procs import eventually
from watch_support import Rig, rig, started_pid

__all__ = ["rig"]  # the fixture


def _state(rig: Rig) -> tuple[episodes.EpisodeState, str]:
    db = open_store(rig.home)
    try:
        with db.reading() as conn:
            return episodes.read(conn), kv_get(conn, OPEN_KEY) or ""
    finally:
        db.close()


def _status_episode(rig: Rig) -> object:
    done = rig.fm("status", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["episode"]


def test_a_status_read_publishes_the_downtime_of_a_killed_watcher(rig: Rig) -> None:
    watch = rig.spawn("watch")
    pid = eventually("the watcher to become healthy", rig.healthy_pid)
    state, open_mark = _state(rig)
    assert open_mark.startswith(f"{pid}:") and not isinstance(state, episodes.Episode)
    assert _status_episode(rig) is None  # healthy: nothing to publish
    os.kill(pid, signal.SIGKILL)
    watch.popen.wait(30)
    # No arm and no new watcher: the status read itself proves the watcher gone.
    episode = _status_episode(rig)
    assert isinstance(episode, str) and episode.startswith("pending:downtime:"), episode
    state, open_mark = _state(rig)
    assert isinstance(state, episodes.Episode) and open_mark == ""
    assert _status_episode(rig) == episode  # published once, then left alone


def _published(rig: Rig) -> bool:
    state, _ = _state(rig)
    return isinstance(state, episodes.Episode) and state.status == "pending"


def test_the_arm_that_saw_its_watcher_die_publishes_before_waiting_for_a_successor(
    rig: Rig,
) -> None:
    owner = rig.spawn("arm", env={"FM_ARM_SUCCESSOR_CONFIRM_TIMEOUT": "60"})
    pid = started_pid(owner.line())
    ident = identity_of(pid)
    assert ident is not None
    db = open_store(rig.home)
    try:  # as a take-over records it before its signal: a successor is coming
        stopping.record(db, pid, ident.token(), stopping.REPLACED)
    finally:
        db.close()
    os.kill(pid, signal.SIGKILL)
    # Read the store directly (a status read would publish it too): the arm, still waiting
    # for a successor, is the one that published.
    eventually("the arm to publish the downtime", lambda: _published(rig))
    assert owner.popen.poll() is None
    owner.popen.send_signal(signal.SIGTERM)
    assert owner.line() == "watcher: FAILED - arm interrupted by SIGTERM"


def test_the_arm_whose_watcher_was_killed_from_outside_publishes_and_fails_at_once(
    rig: Rig,
) -> None:
    owner = rig.spawn("arm", env={"FM_ARM_SUCCESSOR_CONFIRM_TIMEOUT": "3600"})
    pid = started_pid(owner.line())
    os.kill(pid, signal.SIGKILL)  # no fm command stopped it: no successor is coming
    assert owner.rest() == ["watcher: FAILED - cycle ended without an actionable reason"]
    assert owner.wait() == 1
    assert _published(rig)  # published before it failed


def test_a_live_watcher_is_never_reported_down(rig: Rig) -> None:
    owner = rig.spawn("arm")
    assert owner.line().startswith("watcher: started")
    db = open_store(rig.home)
    try:
        assert publish_if_gone(db) is False
    finally:
        db.close()
    state, open_mark = _state(rig)
    assert open_mark and not isinstance(state, episodes.Episode)
    rig.append("check", "k", "check: still watched")
    assert owner.line() == "check: still watched"
