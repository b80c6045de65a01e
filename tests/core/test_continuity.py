"""The continuity engine against real arms and watchers; only the harness is a fake.

The fake harness records every wake it is handed and, at that very instant, what the home's
watcher looks like: the contract is that a successor watcher already holds the singleton with a
fresh beacon whenever a wake reaches the model (unless the wake says restoration failed).
Unready successors are made with launcher scripts standing in for ``fm arm``.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import attrs
import pytest
from firstmate import hookimpl
from firstmate.app.defaults import CorePlugin
from firstmate.continuity.engine import Continuity
from firstmate.continuity.session_lock import SessionRecord, record_path
from firstmate.plugin.handoff import DeliveryReceipt, Handoff, HandoffResult, Session, WakeDelivery
from firstmate.plugin.manager import PluginHost, new_manager
from firstmate.store import episodes
from firstmate.store.database import open_store
from firstmate.store.health import WatcherHealth, watcher_health
from firstmate.store.home import Home, atomic_write
from firstmate.store.identity import current, identity_of
from firstmate.testing.procs import eventually
from watch_support import DEADLINE, Rig, make_rig

FM = " ".join(shlex.quote(part) for part in (sys.executable, "-m", "firstmate", "arm"))


@attrs.frozen
class Got:
    """One wake as the fake harness received it, and the home as it was at that instant."""

    wake: WakeDelivery
    health: WatcherHealth
    episode: str | None
    #: Assertion failures raised inside the delivery callback.
    problem: str | None


@attrs.define(eq=False)
class FakeHarness:
    home: Home
    env: dict[str, str]
    received: list[Got] = attrs.Factory(list)
    #: Called inside the delivery (after the snapshot): may block, raise or refuse.
    behaviour: Callable[[int], DeliveryReceipt] | None = None

    @hookimpl
    def firstmate_deliver_wake(self, wake: WakeDelivery, session: Session) -> DeliveryReceipt | None:
        if session.harness != "fake":
            return None
        health = watcher_health(self.home, self.env)
        problem = None
        try:
            if wake.restoration_failure is None:
                assert health.healthy, f"no healthy watcher at delivery: {health}"
                closed = wake.close.watcher_pid if wake.close is not None else None
                assert health.pid != closed, "the watcher at delivery is the closed one"
        except AssertionError as exc:
            problem = str(exc)
        self.received.append(Got(wake, health, _episode(self.home), problem))
        if self.behaviour is not None:
            return self.behaviour(len(self.received))
        return DeliveryReceipt(True, "recorded")


def _episode(home: Home) -> str | None:
    db = open_store(home)
    try:
        with db.reading() as conn:
            return episodes.read(conn).token()
    finally:
        db.close()


def own_session_lock(home: Home, pid: int | None = None) -> None:
    """Record the session lock for *pid* (default: this test process, the owner)."""
    ident = current() if pid is None else identity_of(pid)
    assert ident is not None
    record = SessionRecord(pid=ident.pid, identity=ident.token(), harness="fake",
                           acquired_at=time.time())
    atomic_write(record_path(home), record.to_json().encode())


@attrs.define(eq=False)
class Bench:
    rig: Rig
    engines: list[Continuity] = attrs.Factory(list)

    @property
    def home(self) -> Home:
        return self.rig.home

    def script(self, name: str, body: str) -> str:
        path = self.rig.tmp / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(0o755)
        return str(path)

    def engine(self, harness: FakeHarness | None = None, *, arm_command: list[str] | None = None,
               detached: bool = False, extra: Sequence[object] = (),
               **env: str) -> tuple[Continuity, FakeHarness]:
        full = {**self.rig.env, **env}
        harness = harness or FakeHarness(self.home, full)
        pm = new_manager()
        pm.register(CorePlugin(), name="firstmate-core")
        pm.register(harness, name="fake")
        for index, plugin in enumerate(extra):
            pm.register(plugin, name=f"extra-{index}")
        engine = Continuity.for_session(Session(self.home, "fake", full), PluginHost(pm),
                                        display_name="Fake", arm_command=arm_command,
                                        detached=detached)
        self.engines.append(engine)
        return engine, harness

    def close(self) -> None:
        for engine in self.engines:
            engine.close(detached_too=True, timeout=DEADLINE)
        self.rig.reap()


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    made = Bench(make_rig(tmp_path))
    own_session_lock(made.home)
    try:
        yield made
    finally:
        made.close()


def ready(engine: Continuity) -> int:
    """Wait for the owner's arm to be ready; its watcher pid."""
    def found() -> int | None:
        slot = engine._slot
        state = engine.state()
        if state.slot != "arm" or slot is None or slot.readiness is None:
            return None
        return slot.readiness.watcher_pid

    pid = eventually("the owner's arm to be ready", found)
    assert isinstance(pid, int)
    return pid


def received(harness: FakeHarness, count: int) -> list[Got]:
    eventually(f"{count} delivered wake(s)", lambda: len(harness.received) >= count)
    return harness.received[:count]


def dead(pid: int) -> bool:
    return identity_of(pid) is None


# --- the ordinary path --------------------------------------------------------------------------


def test_every_wake_is_delivered_with_a_confirmed_successor_already_watching(bench: Bench) -> None:
    engine, harness = bench.engine()
    assert engine.start() is None
    first_watcher = ready(engine)
    for n in (1, 2):
        bench.rig.append("check", f"k{n}", f"check: k{n}")
        received(harness, n)
    launches = engine.state().launches
    assert len(launches) == 3
    for n, got in enumerate(harness.received, start=1):
        wake = got.wake
        assert got.problem is None
        assert wake.reasons == (f"check: k{n}",)
        assert wake.restoration_failure is None
        assert wake.close is not None and wake.close.arm_pid == launches[n - 1]
        assert wake.handoff is not None and wake.handoff.confirmed and not wake.handoff.noop
        assert got.health.healthy and got.health.beacon_age is not None
        # The successor carries the handling episode of this close before the model sees it.
        assert got.episode is not None and got.episode.startswith("pending:handling:")
        lines = wake.text.split("\n")
        assert lines[0] == "FIRSTMATE_OP: fleet wake (Fake)"
        assert lines[1] == f"check: k{n}"
        assert "run `fm wake drain`" in wake.text and "never arm" in wake.text
    assert harness.received[0].wake.close is not None
    assert harness.received[0].wake.close.watcher_pid == first_watcher
    assert all(receipt.delivered for _, receipt in engine.receipts)
    # The diagnostic log is opt-in.
    assert not (bench.home.logs / "continuity.log").exists()


def test_a_one_shot_owner_detaches_its_successor_and_delivers_after_its_status_line(
        bench: Bench) -> None:
    engine, harness = bench.engine(detached=True)
    arm = engine.foreground()
    assert os.getsid(arm.pid) == os.getsid(0)  # the foreground arm stays in our tree
    reading = engine.await_readiness(arm)
    assert reading is not None and reading.kind == "started"
    bench.rig.append("check", "one", "check: one")
    close = engine.await_close(arm, DEADLINE)
    assert close is not None and close.reasons == ("check: one",)
    wake, receipt = engine.handle_close(close)
    assert receipt.delivered and wake.restoration_failure is None
    got = harness.received[0]
    assert got.problem is None and got.health.healthy
    successor = engine.state().launches[1]
    assert os.getsid(successor) == successor  # its own session, away from the hook's
    assert wake.handoff is not None and wake.handoff.confirmed


# --- handoff confirmation ---------------------------------------------------------------------


@attrs.define(eq=False)
class ScriptedConfirm:
    """Answers the first confirmations from a script; None lets the core's default run."""

    answers: list[HandoffResult | None]
    calls: list[Handoff] = attrs.Factory(list)

    @hookimpl
    def firstmate_confirm_handoff(self, handoff: Handoff) -> HandoffResult | None:
        self.calls.append(handoff)
        return self.answers.pop(0) if self.answers else None


BUSY = HandoffResult(False, message="watcher: FAILED - store busy")


@pytest.mark.parametrize(("answers", "calls", "failure", "superseded"), [
    # A newer pipeline moved the generation mid-restore: delivered like a confirmed wake.
    ([HandoffResult(False, superseded=True, message="generation moved")], 1, None, True),
    # A failed confirmation is retried once (here the retry reaches the core's real one).
    ([BUSY, None], 2, None, False),
    # Failing twice is a restoration failure: one typed line; a live successor is kept.
    ([BUSY, BUSY], 2, "watcher: FAILED - Fake could not confirm the watcher handoff: store busy",
     False),
])
def test_handoff_confirmation_outcomes(bench: Bench, answers: list[HandoffResult | None],
                                       calls: int, failure: str | None,
                                       superseded: bool) -> None:
    confirm = ScriptedConfirm(list(answers))
    engine, harness = bench.engine(extra=[confirm])
    assert engine.start() is None
    ready(engine)
    bench.rig.append("check", "h", "check: h")
    got = received(harness, 1)[0]
    assert got.wake.restoration_failure == failure
    assert got.wake.text.count("watcher: FAILED") == (failure is not None)
    assert len(confirm.calls) == calls
    handoff = confirm.calls[0]
    assert handoff.generation is not None and handoff.watcher_pid == got.health.pid
    assert handoff.close.reasons == ("check: h",)
    assert got.wake.handoff is not None and got.wake.handoff.superseded is superseded
    # Nothing was retired: the successor is still the owner's live arm, watching.
    state = engine.state()
    assert state.slot == "arm" and state.arm_pid == handoff.successor_arm_pid
    assert watcher_health(bench.home, bench.rig.env).pid == handoff.watcher_pid


def test_a_dead_child_is_an_empty_slot_while_its_close_is_still_pending(bench: Bench) -> None:
    gate, entered = threading.Event(), threading.Event()

    @attrs.define(eq=False)
    class HeldConfirm:
        @hookimpl
        def firstmate_confirm_handoff(self, handoff: Handoff) -> HandoffResult | None:
            entered.set()
            assert gate.wait(DEADLINE * 2)
            return None  # then the core's confirmation

    engine, harness = bench.engine(extra=[HeldConfirm()])
    assert engine.start() is None
    ready(engine)
    bench.rig.append("check", "p", "check: p")
    assert entered.wait(DEADLINE)  # the pump is busy confirming; the successor is in the slot
    successor = engine.state().arm_pid
    assert successor is not None and engine.state().slot == "arm"
    os.kill(successor, signal.SIGKILL)
    eventually("the dead successor to count as no arm", lambda: engine.state().slot == "empty")
    assert engine.state().launches[-1] == successor  # its close is still waiting for the pump
    gate.set()
    got = received(harness, 1)[0]
    assert got.wake.reasons == ("check: p",)
    # The dead successor's close is then handled: a fresh arm restores the watch.
    eventually("a fresh arm after the successor died",
               lambda: len(engine.state().launches) == 3 and engine.state().slot == "arm")


# --- unready successors -----------------------------------------------------------------------


def test_an_unready_successor_is_retired_and_the_retry_restores_the_watcher(bench: Bench) -> None:
    marker = bench.rig.tmp / "hung-once"
    launcher = bench.script("arm-hangs-once", (
        f'if [ -n "$FM_WATCH_PREDECESSOR_ARM_PID" ] && [ ! -e {shlex.quote(str(marker))} ]; then\n'
        f"  : > {shlex.quote(str(marker))}; exec sleep 600\nfi\nexec {FM}"))
    engine, harness = bench.engine(
        arm_command=[launcher], FM_WATCH_READINESS_TIMEOUT_MS="8000",
        FM_WATCH_REARM_RETRY_BASE_MS="10", FM_WATCH_EXTENSION_LOG_KEEP_LINES="200")
    assert engine.start() is None
    ready(engine)
    bench.rig.append("check", "slow", "check: slow")
    got = received(harness, 1)[0]
    assert got.problem is None and got.wake.restoration_failure is None
    initial, hung, restored = engine.state().launches
    assert dead(hung)
    assert got.wake.handoff is not None and got.wake.handoff.confirmed
    log = (bench.home.logs / "continuity.log").read_text()
    assert f"readiness-timeout arm={hung} after=8s" in log
    assert f"launched arm={restored} predecessor={initial}" in log
    assert "confirm generation=" in log and "confirmed=True" in log


def fake_arms(bench: Bench, successor: str) -> tuple[str, Path]:
    """A shell stand-in for ``fm arm`` and the FIFO that makes its first cycle close.

    The first launch reports ready and closes with whatever line the test writes to the FIFO;
    a successor (``FM_WATCH_PREDECESSOR_ARM_PID`` set) behaves as *successor* says (``hang``:
    never print a status line; ``ignore-term``: the same, ignoring TERM); any later launch
    reports ready at once and stays.
    """
    fifo, marker = bench.rig.tmp / "close.fifo", bench.rig.tmp / "first-launch"
    os.mkfifo(fifo)
    q = shlex.quote
    launcher = bench.script("fake-arm", f"""
if [ -n "$FM_WATCH_PREDECESSOR_ARM_PID" ]; then mode={q(successor)}
elif [ ! -e {q(str(marker))} ]; then : > {q(str(marker))}; mode=first
else mode=later; fi
case $mode in
first) echo "watcher: attached pid=$$ (beacon 0s)"; read -r reason < {q(str(fifo))}
       echo "$reason"; exit 0;;
hang) exec sleep 600;;
ignore-term) trap '' TERM; exec sleep 600;;
*) echo "watcher: attached pid=$$ (beacon 0s)"; exec sleep 600;;
esac""")
    return launcher, fifo


def test_exhausted_retries_deliver_the_original_wake_with_one_failure_line(bench: Bench) -> None:
    launcher, fifo = fake_arms(bench, "hang")
    # The readiness bound also covers the first arm's own start: 3 s holds on a loaded machine
    # (at 1 s a slow first start was retired, and its replacement took the close instead).
    engine, harness = bench.engine(
        arm_command=[launcher], FM_WATCH_READINESS_TIMEOUT_MS="3000",
        FM_WATCH_REARM_RETRY_BASE_MS="10", FM_WATCH_REARM_RETRY_MAX_MS="20",
        FM_WATCH_REARM_RETRY_LIMIT="3")
    assert engine.start() is None
    ready(engine)
    _write_fifo(fifo, b"check: lost\n")
    wake = received(harness, 1)[0].wake
    assert wake.reasons == ("check: lost",)
    assert wake.text.split("\n")[1] == "check: lost"
    assert wake.text.count("watcher: FAILED") == 1
    failure = wake.restoration_failure
    assert failure is not None
    assert failure.startswith("watcher: FAILED - Fake could not restore the watcher after "
                              "3 attempts: arm pid=")
    assert "printed no status line within 3s" in failure
    assert failure in wake.text.split("\n")
    launches = engine.state().launches
    assert len(launches) == 4
    assert all(dead(pid) for pid in launches[1:])  # every unready arm was retired
    assert engine.state().standing_down == failure


def test_a_successor_that_ignores_term_gets_the_fallback_at_once_and_no_overlapping_retry(
        bench: Bench) -> None:
    launcher, fifo = fake_arms(bench, "ignore-term")
    engine, harness = bench.engine(  # (3 s: the bound covers the first arm's start too)
        arm_command=[launcher], FM_WATCH_READINESS_TIMEOUT_MS="3000",
        FM_WATCH_ARM_RETIRE_TIMEOUT_MS="200", FM_WATCH_REARM_RETRY_BASE_MS="10")
    assert engine.start() is None
    ready(engine)
    _write_fifo(fifo, b"check: stuck\n")
    wake = received(harness, 1)[0].wake
    failure = wake.restoration_failure
    assert failure is not None and wake.reasons == ("check: stuck",)
    assert "after 1 attempt:" in failure and "did not retire within 0.2s" in failure
    state = engine.state()
    assert len(state.launches) == 2 and state.slot == "retained"
    stuck = state.launches[1]
    assert state.arm_pid == stuck and not dead(stuck)
    # A repair finds the slot taken: no overlapping arm.
    engine.rearm()
    assert engine.flush()
    assert engine.state().launches == state.launches
    # The stuck arm's own close is a new supervised event: restored, the fallback not replayed.
    os.kill(stuck, signal.SIGKILL)
    eventually("a fresh arm after the stuck one died",
               lambda: len(engine.state().launches) == 3 and engine.state().slot == "arm")
    ready(engine)
    assert engine.flush()
    assert len(harness.received) + engine.state().pending_deliveries == 1


def test_a_late_reason_line_replaces_the_provisional_failure_retry(bench: Bench) -> None:
    go_exit, go_speak = bench.rig.tmp / "exit.fifo", bench.rig.tmp / "speak.fifo"
    for fifo in (go_exit, go_speak):
        os.mkfifo(fifo)
    marker = bench.rig.tmp / "first"
    fake_arm = bench.rig.tmp / "fake_arm.py"
    fake_arm.write_text(f"""
import os, sys
print(f"watcher: attached pid={{os.getpid()}} (beacon 0s)", flush=True)
if os.path.exists({str(marker)!r}):
    os.execvp("sleep", ["sleep", "600"])
open({str(marker)!r}, "w").close()
if os.fork() == 0:
    # A descendant that keeps the arm's stdout open and speaks only after the arm is gone.
    with open({str(go_speak)!r}) as fifo:
        fifo.read()
    print("check: late", flush=True)
    os._exit(0)
with open({str(go_exit)!r}) as fifo:
    fifo.read()
os._exit(1)
""")
    engine, harness = bench.engine(
        arm_command=[sys.executable, str(fake_arm)], FM_WATCH_REARM_RETRY_BASE_MS="120000")
    assert engine.start() is None
    ready(engine)
    first = engine.state().launches[0]
    _write_fifo(go_exit, b"go")
    eventually("the provisional failure retry", lambda: engine.state().slot == "retry-scheduled")
    _write_fifo(go_speak, b"go")
    wake = received(harness, 1)[0].wake
    assert wake.reasons == ("check: late",) and wake.restoration_failure is None
    assert wake.close is not None and wake.close.arm_pid == first
    launches = engine.state().launches
    assert len(launches) == 2  # the successor, not a retry and a successor
    assert engine.flush() and engine.state().slot == "arm"


def _write_fifo(path: Path, data: bytes) -> None:
    def opened() -> int | None:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return None  # no reader yet

    fd = eventually(f"a reader on {path.name}", opened)
    assert isinstance(fd, int)
    os.write(fd, data)
    os.close(fd)


# --- ordering ---------------------------------------------------------------------------------


def test_overlapping_closes_restore_at_once_and_deliver_in_order(bench: Bench) -> None:
    gate = threading.Event()

    def hold_first(count: int) -> DeliveryReceipt:
        if count == 1:
            assert gate.wait(DEADLINE * 2), "the test never released the first delivery"
        return DeliveryReceipt(True)

    engine, harness = bench.engine()
    harness.behaviour = hold_first
    assert engine.start() is None
    ready(engine)
    bench.rig.append("check", "a", "check: a")
    received(harness, 1)  # the first delivery is now in flight, held
    seen = {harness.received[0].health.pid}
    for n, key in enumerate(("b", "c"), start=2):
        bench.rig.append("check", key, f"check: {key}")

        def restored(n: int = n) -> bool:
            health = watcher_health(bench.home, bench.rig.env)
            return (len(engine.state().launches) == n + 1 and health.healthy
                    and health.pid not in seen and engine.state().pending_deliveries == n)

        # Restoration does not wait for the held delivery: a new watcher is live already.
        eventually(f"the successor of close {n} while delivery 1 is held", restored)
        seen.add(watcher_health(bench.home, bench.rig.env).pid)
        assert len(harness.received) == 1
    gate.set()
    got = received(harness, 3)
    assert [g.wake.reasons for g in got] == [("check: a",), ("check: b",), ("check: c",)]
    for g in got:
        # Each wake keeps the handoff its own successor confirmed, even though that successor
        # had already closed again by the time the delayed wake was delivered.
        assert g.wake.restoration_failure is None
        assert g.wake.handoff is not None and g.wake.handoff.confirmed
        assert g.problem is None


def test_a_failed_delivery_never_cancels_restoration(bench: Bench) -> None:
    def flaky(count: int) -> DeliveryReceipt:
        if count == 1:
            raise RuntimeError("harness went away")
        if count == 2:
            return DeliveryReceipt(False, "harness refused the follow-up")
        return DeliveryReceipt(True)

    engine, harness = bench.engine()
    harness.behaviour = flaky
    assert engine.start() is None
    ready(engine)
    for n in (1, 2, 3):
        bench.rig.append("check", f"f{n}", f"check: f{n}")
        got = received(harness, n)[-1]
        assert got.problem is None and got.health.healthy
    eventually("three receipts", lambda: len(engine.receipts) == 3)
    receipts = [receipt for _, receipt in engine.receipts]
    assert receipts[0] == DeliveryReceipt(False, "RuntimeError: harness went away")
    assert receipts[1] == DeliveryReceipt(False, "harness refused the follow-up")
    assert receipts[2].delivered
    # Still watching after all of it.
    ready(engine)
    assert watcher_health(bench.home, bench.rig.env).healthy


# --- the session lock -------------------------------------------------------------------------


def test_a_lost_session_lock_gives_a_typed_line_and_launches_nothing(bench: Bench) -> None:
    engine, harness = bench.engine()
    assert engine.start() is None
    watcher = ready(engine)
    other = bench.rig.sleeper()
    own_session_lock(bench.home, other.pid)  # another session took the lock mid-cycle
    bench.rig.append("check", "mine", "check: mine")
    wake = received(harness, 1)[0].wake
    failure = wake.restoration_failure
    assert failure is not None and wake.reasons == ("check: mine",)
    assert failure.startswith("watcher: FAILED - Fake did not re-arm: session lock ")
    assert failure.endswith("; not re-arming")
    assert wake.text.count("watcher: FAILED") == 1
    assert len(engine.state().launches) == 1  # no successor was started
    assert engine.state().standing_down == failure
    eventually("the closed watcher to exit", lambda: dead(watcher))
    assert watcher_health(bench.home, bench.rig.env).state == "none"


def test_starting_without_the_session_lock_launches_nothing(bench: Bench) -> None:
    record_path(bench.home).unlink()
    engine, _ = bench.engine()
    refused = engine.start()
    assert refused == ("watcher: FAILED - Fake did not re-arm: session lock is free; run fm lock "
                       "acquire in the primary session; not re-arming")
    assert engine.flush()
    assert engine.state().launches == ()
    own_session_lock(bench.home)
    engine.rearm()
    ready(engine)
    assert engine.state().standing_down is None


# --- suspend and resume (a session replacement that retires its arm) ---------------------------


def test_a_suspended_owner_keeps_an_actionable_close_and_restores_it_once_on_resume(
        bench: Bench) -> None:
    q = shlex.quote
    marker = bench.rig.tmp / "first-launch"
    # The first arm closes with a reason exactly when it is stopped; later arms just watch.
    launcher = bench.script("fake-arm", f"""
if [ ! -e {q(str(marker))} ]; then
  : > {q(str(marker))}
  trap 'echo "check: closed-at-shutdown"; exit 0' TERM
  echo "watcher: attached pid=$$ (beacon 0s)"
  sleep 600 & wait
  exit 0
fi
echo "watcher: attached pid=$$ (beacon 0s)"; exec sleep 600""")
    confirm = ScriptedConfirm([HandoffResult(True, message="confirmed")])
    engine, harness = bench.engine(arm_command=[launcher], extra=[confirm])
    assert engine.start() is None
    ready(engine)
    first = engine.state().arm_pid
    assert first is not None
    assert engine.suspend()
    eventually("the suspended arm to stop", lambda: dead(first))
    eventually("its actionable close to be kept", lambda: engine._deferred)
    engine.rearm()  # a repair while suspended launches nothing
    assert engine.flush()
    assert engine.state().launches == (first,) and harness.received == []
    engine.resume()
    got = received(harness, 1)[0]
    assert got.wake.reasons == ("check: closed-at-shutdown",)
    assert got.wake.restoration_failure is None
    launches = engine.state().launches
    assert len(launches) == 2 and engine.state().slot == "arm"
    assert confirm.calls and confirm.calls[0].successor_arm_pid == launches[1]
    assert engine.flush() and len(harness.received) == 1  # delivered once


def test_a_successor_whose_watcher_died_before_confirmation_is_repaired_not_stood_down(
        bench: Bench) -> None:
    @attrs.define(eq=False)
    class KillsTheWatcher:
        calls: list[Handoff] = attrs.Factory(list)

        @hookimpl
        def firstmate_confirm_handoff(self, handoff: Handoff) -> HandoffResult | None:
            self.calls.append(handoff)
            if len(self.calls) == 1 and handoff.watcher_pid is not None:
                os.kill(handoff.watcher_pid, signal.SIGKILL)
                eventually("the successor's watcher to die", lambda: dead(handoff.watcher_pid or 0))
            return HandoffResult(False, message="watcher: FAILED - no live watcher to confirm")

    confirm = KillsTheWatcher()
    engine, harness = bench.engine(extra=[confirm])
    assert engine.start() is None
    ready(engine)
    bench.rig.append("check", "r", "check: repaired")
    got = received(harness, 1)[0]
    assert got.wake.reasons == ("check: repaired",)
    assert got.wake.restoration_failure is not None
    assert "could not confirm the watcher handoff" in got.wake.restoration_failure
    # The dead successor was retired and a fresh arm restores the watch: the owner did not stand
    # down, so supervision goes on without anyone asking for a repair.
    eventually("a fresh arm after the repair",
               lambda: engine.state().slot == "arm" and len(engine.state().launches) == 3)
    assert engine.state().standing_down is None
    assert eventually("a healthy watcher again",
                      lambda: watcher_health(bench.home, bench.rig.env).healthy)
