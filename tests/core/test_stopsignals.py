"""stopsignals.held(): a stop that lands while a child is started waits until it is recorded,
and the child inherits no stop signal held."""

from __future__ import annotations

import signal
import subprocess
import threading

from firstmate.base import stopsignals


def _handled(seen: list[str]) -> object:
    def handler(signum: int, frame: object) -> None:
        seen.append("stop")

    return handler


def test_a_stop_during_a_held_spawn_lands_after_it_and_not_before() -> None:
    seen: list[str] = []
    old = signal.signal(signal.SIGTERM, _handled(seen))  # type: ignore[arg-type]
    try:
        with stopsignals.held():
            # (to this thread: another thread of the test process may take a process-wide one)
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
            seen.append("recorded")  # the child's record is made before the stop is handled
        assert seen == ["recorded", "stop"]
        assert signal.getsignal(signal.SIGTERM) is not None
    finally:
        signal.signal(signal.SIGTERM, old)


def test_a_child_started_while_stops_are_held_holds_none_of_them() -> None:
    # A tmux server started under held() passes its mask to every crew it runs: it must be
    # the ordinary one, or crews would never end on a hang-up, an interrupt or a TERM.
    with stopsignals.held():
        done = subprocess.run(["grep", "^SigBlk", "/proc/self/status"], capture_output=True,
                              text=True, timeout=30, check=True)
    blocked = int(done.stdout.split()[1], 16)
    for sig in stopsignals.STOP_SIGNALS:
        assert not blocked & (1 << (int(sig) - 1)), (sig, done.stdout)


def test_held_leaves_a_stop_already_held_held_and_the_handlers_as_they_were() -> None:
    before = {sig: signal.getsignal(sig) for sig in stopsignals.STOP_SIGNALS}
    stopsignals.block()
    try:
        with stopsignals.held():
            pass
        assert signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    finally:
        stopsignals.unblock()
    assert {sig: signal.getsignal(sig) for sig in stopsignals.STOP_SIGNALS} == before


def test_off_the_main_thread_held_changes_nothing() -> None:
    errors: list[BaseException] = []

    def spawn() -> None:
        try:
            with stopsignals.held():
                subprocess.run(["true"], check=True, timeout=30)
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=spawn)
    worker.start()
    worker.join(30)
    assert errors == []
