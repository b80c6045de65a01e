"""The re-arm owner's engine: successor, readiness, handoff confirmation, then delivery.

Every harness plugin that owns re-arm configures this one engine. On an actionable close it

1. starts the successor arm with ``FM_WATCH_PREDECESSOR_ARM_PID`` naming the closed arm, before
   anything else (after a session-lock recheck: a session that lost the lock launches nothing);
2. waits for the successor's readiness line (``FM_WATCH_READINESS_TIMEOUT_MS``, per harness,
   12 s by default); an unready successor is TERMed, its retirement waited for (bounded), and the
   start retried with exponential backoff up to a limit;
3. confirms the handoff (``firstmate_confirm_handoff``; the core runs
   ``fm arm --handling-delivered``), retrying a failed confirmation once;
4. delivers the wake (``firstmate_deliver_wake``), with exactly one typed
   ``watcher: FAILED - …`` line when restoration failed.

Two shapes use it. A long-lived owner (a bridge for an in-process harness) calls :meth:`start`:
arm children are tracked by threads, closes are handled on one *pump* thread and wakes are
delivered on one *delivery* thread, so a successor start never waits behind a delivery while
deliveries stay serialised and in close order. A one-shot hook process (Claude) calls
:meth:`foreground` and then :meth:`handle_close`: successors are launched detached (own session,
stdio away from the hook's pipes) and the hook exits once the successor's status line was read.

See ``docs/continuity.md`` for the guarantees and every knob.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import attrs

from firstmate.base.names import fm_module_argv
from firstmate.base.waketext import compose, one_line
from firstmate.continuity.armchild import ArmChild
from firstmate.continuity.enginevalues import (
    DEFAULT_READINESS,
    FAILED,
    PREDECESSOR_ENV,
    STABLE_AFTER,
    ContinuityRefused,
    EngineState,
    Restoration,
    Settings,
    diagnostic_log,
    failure_line,
    strip_failed,
    why_closed,
    why_unready,
)
from firstmate.continuity.outbox import Outbox
from firstmate.continuity.readiness import ReadinessReader
from firstmate.plugin.handoff import (
    ArmRef,
    Close,
    DeliveryReceipt,
    Handoff,
    HandoffResult,
    Readiness,
    Session,
    WakeDelivery,
)

if TYPE_CHECKING:
    from firstmate.plugin.manager import PluginHost
    from firstmate.store.ledgers import BoundedLog

# --- the engine --------------------------------------------------------------------------------


def default_arm_command() -> tuple[str, ...]:
    return tuple(fm_module_argv("arm"))


@attrs.define(eq=False)
class Continuity:
    """One re-arm owner. Build it with :meth:`for_session`."""

    session: Session
    host: PluginHost
    display_name: str
    settings: Settings
    arm_command: tuple[str, ...]
    #: Successors go into their own session with stdio away from ours (one-shot hook owners).
    detached: bool = False
    #: None while this session owns the session lock, else a one-line reason (default:
    #: :func:`firstmate.continuity.session_lock.recheck_owned` for the session's home).
    lock_check: Callable[[], str | None] | None = None
    #: Receives one human-readable line per event (the demo's live view).
    observer: Callable[[str], None] | None = None
    _slot: ArmChild | None = None
    _scheduled: bool = False
    _children: list[ArmChild] = attrs.Factory(list)
    _events: queue.Queue[tuple[str, ArmChild | threading.Event | None]] = attrs.Factory(
        queue.Queue)
    _outbox: Outbox = attrs.field(init=False)
    _readiness: ReadinessReader = attrs.field(init=False)
    _guard: threading.Lock = attrs.Factory(threading.Lock)
    _nudge: threading.Event = attrs.Factory(threading.Event)
    _threads: list[threading.Thread] = attrs.Factory(list)
    _running: bool = False
    _stopping: bool = False
    _streak: int = 0
    _standing_down: str | None = None
    _log: BoundedLog | None = None
    #: Set by :meth:`suspend`: no arm is launched and actionable closes wait in ``_deferred``.
    _suspended: bool = False
    _deferred: list[ArmChild] = attrs.Factory(list)

    def __attrs_post_init__(self) -> None:
        self._outbox = Outbox(self._send)
        self._readiness = ReadinessReader(self.host, self.settings.readiness_timeout, self._note,
                                          self._diag)

    @classmethod
    def for_session(
        cls,
        session: Session,
        host: PluginHost | None = None,
        *,
        display_name: str | None = None,
        readiness_timeout: float = DEFAULT_READINESS,
        arm_command: Sequence[str] | None = None,
        detached: bool = False,
        lock_check: Callable[[], str | None] | None = None,
        observer: Callable[[str], None] | None = None,
    ) -> Continuity:
        """An owner for *session*. *host* defaults to the core plus the session's harness
        plugin; *readiness_timeout* is the harness's default (the env knob overrides it)."""
        if host is None:
            from firstmate.plugin.manager import load_harness

            host = load_harness(session.harness, session.env)
        if display_name is None:
            info = host.harness(session.harness)
            display_name = info.display_name if info is not None else (
                session.harness[:1].upper() + session.harness[1:] or "Firstmate")
        settings = Settings.from_env(session.env, readiness_timeout=readiness_timeout)
        engine = cls(session, host, one_line(display_name, 80), settings,
                     tuple(arm_command or default_arm_command()), detached=detached,
                     lock_check=lock_check, observer=observer)
        engine._log = diagnostic_log(session, settings)
        return engine

    # --- public: long-lived owner ------------------------------------------------------------

    def start(self) -> str | None:
        """Start the owner's threads and its first arm. Returns the typed refusal line when
        this session does not own the session lock (no arm is launched; :meth:`rearm` retries)."""
        if self._running:
            return None
        self._running = True
        thread = threading.Thread(target=self._pump, name="fm-continuity-pump", daemon=True)
        self._threads.append(thread)
        thread.start()
        self._outbox.start()
        refused = self._check_lock()
        if refused is None:
            self._post("start", None)
        return refused

    def rearm(self) -> None:
        """Repair: start an arm when the slot is empty (a dead child counts as empty), also
        after the owner stood down. A live child or a scheduled retry makes this a no-op."""
        self._post("repair", None)

    def suspend(self, timeout: float = 10.0) -> bool:
        """Stop every arm this owner runs and launch none until :meth:`resume` (a session being
        replaced whose harness cannot say whether a replacement follows). A close that was
        already actionable is kept, and restored and delivered at :meth:`resume`, once. True
        when the pump applied it within *timeout*."""
        done = threading.Event()
        self._post("suspend", done)
        return done.wait(timeout)

    def resume(self) -> None:
        """Undo :meth:`suspend`: restore and deliver the closes it kept, in order, then start an
        arm when none runs."""
        self._post("resume", None)

    def close(self, *, stop_arm: bool = True, detached_too: bool = False,
              timeout: float = 10.0) -> None:
        """Stop the owner. With *stop_arm* every live arm child (detached ones only with
        *detached_too*) is TERMed, and KILLed when it outlives *timeout*. Wakes already queued
        are still delivered."""
        self._stopping = True
        self._nudge.set()
        if stop_arm:
            self._terminate_children(detached_too)
        if self._running:
            self._events.put(("stop", None))
            for thread in self._threads:
                thread.join(timeout)
            self._outbox.stop(timeout)
        if stop_arm:
            self._terminate_children(detached_too)
            for child in list(self._children):
                if (child.detached and not detached_too) or child.wait_exit(timeout):
                    continue
                child.kill()
                child.wait_exit(timeout)
        self._running = False

    # --- public: one-shot hook owner ---------------------------------------------------------

    def foreground(self) -> ArmChild:
        """Launch an arm inside this process tree (not detached). Raises
        :class:`ContinuityRefused` when this session does not own the session lock."""
        refused = self._check_lock()
        if refused is not None:
            raise ContinuityRefused(refused)
        return self._launch(None, detached=False)

    def await_readiness(self, arm: ArmChild) -> Readiness | None:
        """*arm*'s first ready or failed status line (a failed reading when it exits first);
        None when the readiness timeout runs out."""
        return self._readiness.await_ready(arm)

    def await_close(self, arm: ArmChild, timeout: float | None = None) -> Close | None:
        """Wait for *arm* to settle: its close when actionable, else None (also at *timeout*)."""
        if not arm.wait_settled(timeout):
            return None
        close = arm.close_value()
        return close if close.actionable else None

    def handle_close(self, close: Close) -> tuple[WakeDelivery, DeliveryReceipt]:
        """Restore (successor, readiness, confirmation) and then deliver, in this thread."""
        restoration = self._restore(close)
        wake = self._wake(close, restoration)
        return wake, self._outbox.deliver(wake)

    # --- public: observation -----------------------------------------------------------------

    @property
    def receipts(self) -> list[tuple[WakeDelivery, DeliveryReceipt]]:
        return self._outbox.receipts

    def state(self) -> EngineState:
        slot = self._slot
        if self._scheduled:
            kind = "retry-scheduled"
        elif slot is None or not slot.alive:
            kind = "empty"
        else:
            kind = "retained" if slot.retained else "arm"
        with self._guard:
            launches = tuple(child.pid for child in self._children)
        delivered, pending = self._outbox.counts()
        return EngineState(kind, slot.pid if slot is not None and slot.alive else None,
                           launches, self._standing_down, delivered, pending)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until the pump has handled every event posted before this call (a barrier for
        tests and status). False when it did not within *timeout* or the owner is not running."""
        done = threading.Event()
        if not (self._running and not self._stopping):
            return False
        self._events.put(("flush", done))
        return done.wait(timeout)

    # --- events ------------------------------------------------------------------------------

    def _post(self, kind: str, arm: ArmChild | threading.Event | None) -> None:
        if self._running and not self._stopping:
            self._events.put((kind, arm))

    def _settled(self, arm: ArmChild) -> None:
        self._post("closed", arm)

    def _late(self, arm: ArmChild, line: str) -> None:
        self._diag(f"late-reason arm={arm.pid} line={line}")
        self._nudge.set()
        self._post("late", arm)

    def _pump(self) -> None:
        while True:
            kind, payload = self._events.get()
            if kind == "stop":
                return
            if isinstance(payload, threading.Event):
                if kind == "suspend" and not self._stopping:
                    self._suspend()
                payload.set()
                continue
            if self._stopping:
                continue
            try:
                self._dispatch(kind, payload)
            except Exception as exc:  # the owner outlives any one broken step
                self._diag(f"engine-error {type(exc).__name__}: {exc}")
                self._note(f"continuity: internal error: {type(exc).__name__}: {exc}")

    def _dispatch(self, kind: str, arm: ArmChild | None) -> None:
        if kind == "resume":
            self._resume()
            return
        if self._suspended and kind in ("start", "repair", "restore"):
            return
        if kind in ("start", "repair", "restore"):
            if kind == "repair":
                self._standing_down = None
                self._streak = 0
            elif self._standing_down is not None:
                return
            if self._live_slot() is not None:
                return
            restoration = self._restore(None, first_delay=(
                self.settings.delay(1) if kind == "restore" else 0.0))
            self._after_failure_path(restoration)
        elif kind == "closed" and arm is not None:
            self._closed(arm)
        elif kind == "late" and arm is not None and arm.outcome == "failed":
            # Its close was taken for a failure and that retry has run: the wake still counts.
            self._actionable(arm)

    def _closed(self, arm: ArmChild) -> None:
        if self._slot is arm:
            self._slot = None
        if arm.outcome is not None:
            return
        if arm.reasons():
            self._actionable(arm)
        elif not arm.retired:
            self._failed(arm)

    def _suspend(self) -> None:
        self._suspended = True
        with self._guard:
            children = [child for child in self._children if child.alive and not child.detached]
        for child in children:
            child.retired = True
            child.terminate()
        for child in children:
            if not child.wait_exit(self.settings.retire_timeout):
                child.kill()
                child.wait_exit(self.settings.retire_timeout)
        self._slot = None
        self._diag(f"suspended arms={[child.pid for child in children]}")

    def _resume(self) -> None:
        self._suspended = False
        self._standing_down = None
        self._streak = 0
        deferred, self._deferred = self._deferred, []
        self._diag(f"resumed deferred={[arm.pid for arm in deferred]}")
        for arm in deferred:
            arm.outcome = None
            self._actionable(arm)
        if self._live_slot() is None and not self._stopping:
            self._after_failure_path(self._restore(None))

    def _actionable(self, arm: ArmChild) -> None:
        if self._suspended:
            # Kept for the replacement session: it restores and delivers this close once.
            arm.outcome = "deferred"
            self._deferred.append(arm)
            self._diag(f"deferred close arm={arm.pid}")
            return
        arm.outcome = "actionable"
        self._streak = 0
        close = arm.close_value()
        for reason in close.reasons:
            self._note(f"arm {arm.pid}: {reason}")
        self._diag(f"close arm={arm.pid} watcher={close.watcher_pid} reasons={len(close.reasons)}")
        restoration = self._restore(close)
        if restoration.stopped:
            return
        # A repair (the confirmed successor's watcher died) restarts restoration below, so it
        # must not stand the owner down: only that bounded restoration may.
        if restoration.failure is not None and not (
            restoration.retained or restoration.superseded or restoration.repair
        ):
            self._standing_down = restoration.failure
        self._outbox.put(self._wake(close, restoration))
        if restoration.repair:
            self._post("restore", None)

    def _failed(self, arm: ArmChild) -> None:
        arm.outcome = "failed"
        why = why_closed(arm)
        self._note(f"arm {arm.pid} closed without a wake: {why}")
        self._diag(f"failed-close arm={arm.pid} why={why}")
        if self._standing_down is not None:
            return
        stable = arm.ready_at is not None and time.monotonic() - arm.ready_at >= STABLE_AFTER
        self._streak = 1 if stable else self._streak + 1
        if self._streak > self.settings.retry_limit:
            line = failure_line(self.display_name, self._streak - 1, f"arms kept closing without a reason "
                                                        f"(last: {why})")
            self._after_failure_path(Restoration(failure=line, attempts=self._streak - 1))
            return
        restoration = self._restore(None, closed=arm, first_delay=self.settings.delay(self._streak))
        if restoration.switched:
            self._actionable(arm)
            return
        self._after_failure_path(restoration)

    def _after_failure_path(self, restoration: Restoration) -> None:
        """A restoration with no wake of its own: silent when it worked; otherwise stand down
        and tell the model once."""
        if restoration.stopped or restoration.failure is None:
            return
        if not restoration.retained:
            self._standing_down = restoration.failure
        self._outbox.put(self._wake(None, restoration))

    # --- restoration -------------------------------------------------------------------------

    def _live_slot(self) -> ArmChild | None:
        slot = self._slot
        return slot if slot is not None and slot.alive else None

    def _restore(self, close: Close | None, *, closed: ArmChild | None = None,
                 first_delay: float = 0.0) -> Restoration:
        """Start (or find) a ready successor, then confirm its handoff when *close* has one."""
        live = self._live_slot()
        if live is not None and live.retained:
            self._readiness.adopt_if_ready(live)
        if live is not None:
            if live.retained:
                why = (f"unready arm pid={live.pid} has not retired, so no overlapping arm is "
                       "started")
                return Restoration(failure=failure_line(self.display_name, 0, why), retained=True)
            # A repair or retry already started a ready arm after this close's arm died.
            return self._confirm(close, live, 0)
        predecessor = close.arm_pid if close is not None else None
        attempts, why = 0, "no arm could be started"
        while attempts < self.settings.retry_limit:
            delay = first_delay if attempts == 0 else self.settings.delay(attempts)
            paused = self._pause(delay, closed) if delay > 0 else "go"
            if paused != "go" or self._stopping:
                return Restoration(attempts=attempts, stopped=paused != "switch",
                                   switched=paused == "switch")
            attempts += 1
            refused = self._check_lock()
            if refused is not None:
                return Restoration(failure=refused, attempts=attempts - 1)
            self._diag(f"restore attempt={attempts} predecessor={predecessor}")
            try:
                arm = self._launch(predecessor, detached=self.detached)
            except OSError as exc:
                why = f"the arm could not be started ({exc})"
                self._diag(f"launch-failed {why}")
                continue
            readiness = self._readiness.await_ready(arm)
            if arm.reasons():
                # It closed on a wake of its own already: that close restores its own successor.
                self._diag(f"superseded arm={arm.pid} (closed actionably before confirmation)")
                return Restoration(successor=arm, attempts=attempts, superseded=True)
            if readiness is not None and readiness.ready and arm.alive:
                return self._confirm(close, arm, attempts)
            why = why_unready(arm, readiness, self.settings.readiness_timeout, self.settings.retire_timeout)
            self._diag(f"unready arm={arm.pid} why={why}")
            if not self._retire(arm):
                why += (f"; arm pid={arm.pid} did not retire within "
                        f"{self.settings.retire_timeout:g}s of TERM and stays in charge")
                self._note(f"arm {arm.pid} is unready and would not retire; no retry overlaps it")
                return Restoration(failure=failure_line(self.display_name, attempts, why), attempts=attempts,
                                   retained=True)
        return Restoration(failure=failure_line(self.display_name, attempts, why), attempts=attempts)

    def _confirm(self, close: Close | None, arm: ArmChild, attempts: int) -> Restoration:
        if close is None:
            return Restoration(successor=arm, attempts=attempts)
        ready = arm.readiness
        handoff = Handoff(close=close, successor_arm_pid=arm.pid,
                          watcher_pid=ready.watcher_pid if ready else None,
                          generation=ready.generation if ready else None,
                          harness=self.session.harness, session=self.session)
        result = self._confirm_once(handoff)
        if not result.ok:
            result = self._confirm_once(handoff)  # one retry, against the same token
        if result.ok:
            return Restoration(successor=arm, handoff=result, attempts=attempts,
                               superseded=result.superseded)
        watcher_alive = self._watcher_alive(arm)
        if arm.reasons() or (not watcher_alive and arm.wait_reason(self.settings.retire_timeout)):
            # The successor already closed on a newer wake: not a failed handoff.
            self._diag(f"confirm-superseded arm={arm.pid}")
            return Restoration(successor=arm, attempts=attempts, superseded=True,
                               handoff=attrs.evolve(result, superseded=True))
        failure = (f"{FAILED}{self.display_name} could not confirm the watcher handoff: "
                   f"{strip_failed(result.message)}")
        repair = False
        if not watcher_alive and self._slot is arm:
            if arm.alive:
                repair = self._retire(arm)
            else:  # it ended already (its watcher died, no successor came): retired as is
                arm.retired, self._slot, repair = True, None, True
        return Restoration(successor=arm, handoff=result, failure=failure, attempts=attempts,
                           repair=repair)

    def _confirm_once(self, handoff: Handoff) -> HandoffResult:
        try:
            result = self.host.confirm_handoff(handoff)
        except Exception as exc:  # a broken plugin is a failed confirmation, never a crash
            result = HandoffResult(False, message=f"{type(exc).__name__}: {exc}")
        self._diag(f"confirm generation={handoff.generation} watcher={handoff.watcher_pid} "
                   f"confirmed={result.confirmed} superseded={result.superseded} "
                   f"noop={result.noop} message={result.message}")
        return result

    def _retire(self, arm: ArmChild) -> bool:
        """TERM an unready arm and wait (bounded) for it: True once it is gone."""
        arm.retired = True
        if arm.alive:
            arm.terminate()
        if arm.wait_exit(self.settings.retire_timeout):
            if self._slot is arm:
                self._slot = None
            return True
        arm.retired, arm.retained = False, True
        self._diag(f"retire-timeout arm={arm.pid} after={self.settings.retire_timeout:g}s")
        return False

    def _pause(self, delay: float, closed: ArmChild | None) -> str:
        """Wait out a retry delay: ``go``; ``stop`` when closing; ``switch`` when the closed
        arm's late reason line turned its close actionable."""
        self._scheduled = True
        try:
            deadline = time.monotonic() + delay
            while True:
                if self._stopping:
                    return "stop"
                if closed is not None and closed.outcome == "failed" and closed.reasons():
                    return "switch"
                left = deadline - time.monotonic()
                if left <= 0:
                    return "go"
                self._nudge.wait(left)
                self._nudge.clear()
        finally:
            self._scheduled = False

    def _check_lock(self) -> str | None:
        """None while this session owns the session lock; else the typed line, and stand down."""
        try:
            if self.lock_check is not None:
                refused = self.lock_check()
            else:
                from firstmate.continuity.session_lock import recheck_owned

                refused = recheck_owned(self.session.home, self.session.env)
        except Exception as exc:
            refused = f"session lock could not be checked ({exc}); not re-arming"
        if refused is None:
            return None
        line = f"{FAILED}{self.display_name} did not re-arm: {one_line(refused)}"
        self._standing_down = line
        self._diag(f"lock-refused {refused}")
        self._note(line)
        return line

    def _launch(self, predecessor: int | None, *, detached: bool) -> ArmChild:
        from firstmate.continuity.watchchild import child_env

        env = child_env(self.session.env)
        env.pop(PREDECESSOR_ENV, None)
        if predecessor is not None:
            env[PREDECESSOR_ENV] = str(predecessor)
        harness = self.session.harness
        child = ArmChild.launch(
            self.arm_command, env, lambda pid: ArmRef(pid, predecessor, harness),
            detached=detached, on_settle=self._settled, on_late_reason=self._late,
        )
        with self._guard:
            self._children.append(child)
        self._slot = child
        self._diag(f"launched arm={child.pid} predecessor={predecessor} detached={detached}")
        return child

    def _watcher_alive(self, arm: ArmChild) -> bool:
        ready = arm.readiness
        if ready is None or ready.watcher_pid is None:
            return False
        from firstmate.store.identity import ProcessIdentity, identity_of, matches

        recorded = ProcessIdentity.parse(arm.watcher_identity)
        if recorded is not None:
            return matches(recorded)
        return identity_of(ready.watcher_pid) is not None

    def _terminate_children(self, detached_too: bool) -> None:
        with self._guard:
            children = list(self._children)
        for child in children:
            if (detached_too or not child.detached) and child.alive:
                child.terminate()

    # --- text --------------------------------------------------------------------------------

    def _tools(self) -> bool:
        """Whether this harness was installed with the firstmate MCP server (its tools are
        named in the wake)."""
        from firstmate.plugin.installrecord import mcp_installed

        return mcp_installed(self.session.home, self.session.harness)

    def _wake(self, close: Close | None, restoration: Restoration) -> WakeDelivery:
        reasons = tuple(one_line(r) for r in close.reasons) if close is not None else ()
        failure = None if restoration.superseded else restoration.failure
        return WakeDelivery(
            harness=self.session.harness,
            text=compose(reasons, failure, self.display_name, self._tools()),
            reasons=reasons,
            restoration_failure=failure,
            close=close,
            handoff=restoration.handoff,
        )

    # --- delivery ----------------------------------------------------------------------------

    def _send(self, wake: WakeDelivery) -> DeliveryReceipt:
        """Hand *wake* to the harness plugin (the outbox records the receipt)."""
        try:
            receipt = self.host.deliver_wake(wake, self.session)
        except Exception as exc:
            receipt = DeliveryReceipt(False, f"{type(exc).__name__}: {exc}")
        if receipt is None:
            receipt = DeliveryReceipt(False, "no plugin delivered the wake")
        self._diag(f"deliver reasons={len(wake.reasons)} failure={wake.restoration_failure} "
                   f"delivered={receipt.delivered} detail={receipt.detail}")
        if not receipt.delivered:
            self._note(f"continuity: wake not delivered: {receipt.detail}")
        return receipt

    # --- diagnostics -------------------------------------------------------------------------

    def _note(self, text: str) -> None:
        if self.observer is not None:
            with contextlib.suppress(Exception):
                self.observer(text)

    def _diag(self, text: str) -> None:
        if self._log is not None:
            with contextlib.suppress(Exception):
                self._log.append(f"{self.session.harness} owner={self.session.owner_pid} {text}")


__all__ = ["Continuity", "default_arm_command"]
