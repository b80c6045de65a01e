"""The doorbell's listening side: a wait is the read itself (a ring ends it, the time runs out,
a stop signal interrupts it), a wake reads only the ring that ended it, and every ring left
behind it (a burst, or one rung while the watcher polled) is answered once, all together."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from firstmate.fast import bell as ringing
from firstmate.store.doorbell import BURST, RATE, Doorbell
from firstmate.store.home import Home


@pytest.fixture
def bell(fm_home: Home) -> Iterator[Doorbell]:
    listening = Doorbell(fm_home)
    if not listening.open():
        pytest.skip("doorbell address busy")
    try:
        yield listening
    finally:
        listening.close()


def queued(bell: Doorbell) -> int:
    """Rings waiting in the socket's queue (read without taking them)."""
    sock: socket.socket = bell._sock  # type: ignore[assignment]
    count = 0
    taken: list[bytes] = []
    try:
        while True:
            taken.append(sock.recv(64, socket.MSG_DONTWAIT))
            count += 1
    except BlockingIOError:
        pass
    for _ in taken:  # put them back: the bell under test reads them
        ringing.ring(bell.home)
    return count


def test_a_single_ring_is_answered_once(bell: Doorbell, fm_home: Home) -> None:
    ringing.ring(fm_home)
    assert bell.wait(5.0)
    assert not bell.wait(0.05)  # nothing left behind it: the next wait waits


def test_a_burst_is_answered_by_the_wake_and_one_more_answer_for_the_rest(
        bell: Doorbell, fm_home: Home) -> None:
    for _ in range(5):  # (the kernel queues only a few: a burst that fits)
        ringing.ring(fm_home)
    assert bell.wait(5.0)
    assert queued(bell) == 4  # the wake read one ring only
    assert bell.wait(5.0)  # the rest: answered at once ...
    assert queued(bell) == 0  # ... and all read by that one answer
    assert not bell.wait(0.05)


def test_a_ring_during_the_poll_after_a_wake_is_answered(bell: Doorbell, fm_home: Home) -> None:
    ringing.ring(fm_home)
    assert bell.wait(5.0)
    ringing.ring(fm_home)  # rung while the watcher answers the first: never lost
    assert bell.wait(0.0)
    assert not bell.wait(0.05)


def test_the_answer_to_leftover_rings_spends_the_rate_like_any(bell: Doorbell,
                                                               fm_home: Home) -> None:
    started = time.monotonic()
    ringing.ring(fm_home)
    ringing.ring(fm_home)
    assert bell.wait(5.0)
    assert bell.wait(0.0)
    refilled = (time.monotonic() - started) * RATE
    assert bell._tokens <= BURST - 2 + refilled  # two answers, two rings' worth of the rate


def test_a_wait_nobody_rings_lasts_its_time_and_a_zero_wait_none(bell: Doorbell) -> None:
    started = time.monotonic()
    assert not bell.wait(0.2)
    assert time.monotonic() - started >= 0.19  # (a receive timeout, not a return at once)
    started = time.monotonic()
    assert not bell.wait(0.0)  # (never the receive timeout of zero, which waits for ever)
    assert not bell.wait(1e-9)
    assert time.monotonic() - started < 5.0


def test_a_ring_ends_a_long_wait_at_once(bell: Doorbell, fm_home: Home) -> None:
    assert not bell.wait(0.01)  # (a short receive timeout set first: the next wait sets its own)
    threading.Timer(0.1, ringing.ring, args=(fm_home,)).start()
    started = time.monotonic()
    assert bell.wait(60.0)
    assert time.monotonic() - started < 30.0  # rung, not timed out


class _Stop(Exception):
    pass


def test_a_stop_signal_interrupts_the_wait(bell: Doorbell) -> None:
    def stop(signum: int, frame: object) -> None:
        raise _Stop

    previous = signal.signal(signal.SIGALRM, stop)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        started = time.monotonic()
        with pytest.raises(_Stop):
            bell.wait(60.0)
        assert time.monotonic() - started < 30.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_wait_longer_than_any_receive_timeout_still_waits(bell: Doorbell, fm_home: Home) -> None:
    threading.Timer(0.1, ringing.ring, args=(fm_home,)).start()
    assert bell.wait(1e30)  # (no struct overflow: the wait is bounded to a day, and rung)
