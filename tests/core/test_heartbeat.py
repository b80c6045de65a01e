"""The heartbeat: 600 s doubling per consecutive heartbeat up to 7200 s; other wakes reset it."""

from __future__ import annotations

from pathlib import Path

import pytest
from firstmate.store.home import Home
from firstmate.watch.sources import heartbeat
from firstmate.watch.sources.base import PollContext, Source, Wake
from firstmate.watch.sources.heartbeat import HeartbeatSource

T0 = 1_700_000_000.0
BEAT = Wake("heartbeat", "heartbeat", "heartbeat")


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home").ensure()


def ctx(home: Home, now: float, **env: str) -> PollContext:
    return PollContext(home=home, env=env, now=now, poll=1, triage=lambda line: None)


def fire(source: HeartbeatSource, home: Home, now: float, **env: str) -> Wake | None:
    c = ctx(home, now, **env)
    wake = source.poll(c)
    if wake is not None:
        source.commit(wake, c)
    return wake


def test_it_is_a_source() -> None:
    assert isinstance(HeartbeatSource(Home(Path("/nonexistent"))), Source)


def test_the_first_poll_starts_the_clock(home: Home) -> None:
    source = HeartbeatSource(home)
    assert fire(source, home, T0) is None
    assert source.next_due(ctx(home, T0)) == T0 + 600
    assert heartbeat.read(home) == heartbeat.Beat(T0, 0)
    assert (home.state / "heartbeat").stat().st_mode & 0o777 == 0o600


def test_consecutive_heartbeats_back_off_to_the_cap(home: Home) -> None:
    source = HeartbeatSource(home)
    fire(source, home, T0)
    now, gaps = T0, []
    for _ in range(7):
        due = source.next_due(ctx(home, now))
        assert due is not None
        assert fire(source, home, due - 1) is None
        assert fire(source, home, due) == BEAT
        gaps.append(due - now)
        now = due
        source.poll(ctx(home, now))  # learn the next deadline
    assert gaps == [600, 1200, 2400, 4800, 7200, 7200, 7200]


def test_a_non_heartbeat_wake_resets_the_streak_and_the_clock(home: Home) -> None:
    source = HeartbeatSource(home)
    fire(source, home, T0)
    assert fire(source, home, T0 + 600) == BEAT
    assert fire(source, home, T0 + 1800) == BEAT
    assert heartbeat.read(home) == heartbeat.Beat(T0 + 1800, 2)
    heartbeat.reset_streak(home, now=T0 + 2000)
    fresh = HeartbeatSource(home)
    assert fire(fresh, home, T0 + 2599) is None
    assert fire(fresh, home, T0 + 2600) == BEAT


def test_an_uncommitted_heartbeat_is_raised_again_and_does_not_count(home: Home) -> None:
    source = HeartbeatSource(home)
    fire(source, home, T0)
    assert source.poll(ctx(home, T0 + 600)) == BEAT
    assert HeartbeatSource(home).poll(ctx(home, T0 + 601)) == BEAT
    assert heartbeat.read(home) == heartbeat.Beat(T0, 0)


def test_environment_overrides_and_junk(home: Home) -> None:
    source = HeartbeatSource(home)
    fire(source, home, T0, FM_HEARTBEAT="10", FM_HEARTBEAT_MAX="25")
    assert fire(source, home, T0 + 10, FM_HEARTBEAT="10", FM_HEARTBEAT_MAX="25") == BEAT
    assert fire(source, home, T0 + 29, FM_HEARTBEAT="10", FM_HEARTBEAT_MAX="25") is None
    assert fire(source, home, T0 + 30, FM_HEARTBEAT="10", FM_HEARTBEAT_MAX="25") == BEAT
    assert fire(source, home, T0 + 55, FM_HEARTBEAT="10", FM_HEARTBEAT_MAX="25") == BEAT  # capped at 25
    heartbeat.reset_streak(home, now=T0 + 100)
    for junk in ("", "0", "-1", "soon", "nan", "inf"):
        source.poll(ctx(home, T0 + 100, FM_HEARTBEAT=junk, FM_HEARTBEAT_MAX=junk))
        assert source.next_due(ctx(home, T0 + 100)) == T0 + 700


def test_a_corrupt_record_restarts_the_clock(home: Home) -> None:
    (home.state / "heartbeat").write_text("garbage\n")
    source = HeartbeatSource(home)
    assert fire(source, home, T0) is None
    assert source.next_due(ctx(home, T0)) == T0 + 600


def test_streak_is_capped(home: Home) -> None:
    (home.state / "heartbeat").write_text(f"{T0} 99\n")
    beat = heartbeat.read(home)
    assert beat is not None and beat.streak == heartbeat.MAX_STREAK
    assert heartbeat.interval(600, 10**9, 99) == 600 * 2**12
