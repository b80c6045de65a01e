"""stopsignals.held(): a stop that lands while a child is started waits until it is recorded."""

from __future__ import annotations

import signal
import threading

import pytest
from firstmate.base import stopsignals


def test_a_stop_during_a_held_spawn_lands_after_it_and_not_before() -> None:
    seen: list[str] = []

    def handler(signum: int, frame: object) -> None:
        seen.append("stop")

    old = signal.signal(signal.SIGTERM, handler)
    try:
        with stopsignals.held():
            # (to this thread: another thread of the test process may take a process-wide one)
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
            seen.append("recorded")  # the child's record is made before the stop is handled
        assert seen == ["recorded", "stop"]
    finally:
        signal.signal(signal.SIGTERM, old)


def test_held_keeps_a_stop_already_held_held() -> None:
    stopsignals.block()
    try:
        with stopsignals.held():
            pass
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        assert signal.SIGTERM in mask, "a cleanup's hold must survive a nested spawn"
    finally:
        stopsignals.unblock()


@pytest.mark.parametrize("sig", stopsignals.STOP_SIGNALS)
def test_held_holds_every_stop_signal(sig: signal.Signals) -> None:
    with stopsignals.held():
        assert sig in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert sig not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
