"""firstmate.testing.plant arranges what it says, as core's own code then reads it (through
firstmate.testing.state and a real fm): the helpers a plugin's tests rely on instead of core's
store."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from firstmate.api import Home
from firstmate.base.errors import LockTimeout
from firstmate.testing import DEADLINE, fm_command
from firstmate.testing.plant import (
    announced_episode_with_late_row,
    commit_claim,
    plant_claim,
    queue_wake,
    set_last_paced_claim,
    watcher_lock_held,
)
from firstmate.testing.state import claim, episode, pacing_left


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_planted_claim_is_the_ledgers_and_a_newer_one_supersedes_it(
        fm_home: Home, sleeper: subprocess.Popen[bytes]) -> None:
    first = plant_claim(fm_home, "acme", sleeper, session_pid=4_000_000)
    assert claim(fm_home, "acme") == first
    assert (first["epoch"], first["owner_pid"], first["outcome"], first["session_pid"]) == (
        1, sleeper.pid, "arming", 4_000_000)
    second = plant_claim(fm_home, "acme", sleeper, session_pid=None)
    assert second["epoch"] == 2 and claim(fm_home, "other") == {}
    assert commit_claim(fm_home, "acme", 1, sleeper.pid, "wake") is False
    assert claim(fm_home, "acme")["outcome"] == "arming"
    assert commit_claim(fm_home, "acme", 2, sleeper.pid, "wake") is True
    assert claim(fm_home, "acme")["outcome"] == "wake"


def test_the_last_paced_claim_sets_the_wait(fm_home: Home) -> None:
    assert pacing_left(fm_home, "acme", 10.0) == 0.0
    set_last_paced_claim(fm_home, "acme", time.time())
    assert 8.0 < pacing_left(fm_home, "acme", 10.0) <= 10.0
    assert pacing_left(fm_home, "other", 10.0) == 0.0
    set_last_paced_claim(fm_home, "acme", time.time() - 60)
    assert pacing_left(fm_home, "acme", 10.0) == 0.0


def test_the_watcher_lock_is_held_for_the_block_only(fm_home: Home) -> None:
    # Held: a second holder cannot take it.
    with watcher_lock_held(fm_home), pytest.raises(LockTimeout), watcher_lock_held(fm_home):
        pass  # (never reached)
    with watcher_lock_held(fm_home):  # released: it can be taken again
        pass


def test_a_queued_wake_opens_a_pending_episode(fm_home: Home) -> None:
    assert episode(fm_home) == {}
    assert queue_wake(fm_home, "signal", "a", "waiting work") == 1
    assert episode(fm_home)["status"] == "pending"


def test_an_announced_episode_with_a_late_row(fm_home: Home) -> None:
    announced_episode_with_late_row(fm_home)
    assert (episode(fm_home)["status"], episode(fm_home)["kind"]) == ("announced", "downtime")
    done = subprocess.run(fm_command("wake", "query", "--json"), capture_output=True,
                          text=True, timeout=DEADLINE, check=False)
    found = json.loads(done.stdout)
    assert (found["depth"], found["last_seq"]) == (2, 99), (done.stdout, done.stderr)
