"""The bridge's policy: generations, the session lock, and the continuity engine's lifecycle.

One :class:`BridgeOwner` serves one harness process. The shim's reader thread calls
:meth:`BridgeOwner.handle` for every message; the engine's delivery thread calls
:meth:`BridgeOwner.deliver` through the :class:`ShimDelivery` plugin this module registers.

Generations (docs/bridge.md): a ``session_start`` makes its generation active; a non-terminal
``session_shutdown`` puts it in ``handoff``. Deliveries wait while the phase is ``handoff`` (or no
session started yet) and go to the next active generation, each exactly once; a harness that
refused one because its session was being replaced gets it again in the new generation. A profile
with ``retire_on_shutdown`` (omp) suspends the engine at shutdown, which keeps closes that were
already actionable and restores them when the replacement starts. ``quit`` is terminal.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import attrs

from firstmate import hookimpl
from firstmate.base.envnum import PID_MAX, decimal, env_int
from firstmate.base.waketext import one_line
from firstmate.host.bridge.channel import DEFAULT_DELIVER_TIMEOUT, Channel
from firstmate.host.bridge.protocol import PROTOCOL, Message
from firstmate.plugin.handoff import DeliveryReceipt, Session, WakeDelivery
from firstmate.plugin.harness import BridgeProfile
from firstmate.store.home import Home, atomic_write

if TYPE_CHECKING:
    from firstmate.continuity.engine import Continuity
    from firstmate.host.bridge.idlequeue import IdleQueue
    from firstmate.plugin.manager import PluginHost

DELIVER_TIMEOUT_ENV = "FM_BRIDGE_DELIVER_TIMEOUT_MS"
#: Longest a wake waits for a session to become active before it is left in the queue.
HOLD_LIMIT = 600.0
PHASES = ("waiting", "active", "handoff", "quit")


@attrs.define(eq=False)
class BridgeOwner:
    harness: str
    profile: BridgeProfile
    home: Home
    env: dict[str, str]
    channel: Channel
    host: PluginHost
    display_name: str = ""
    #: Builds the engine (tests swap the arm command through it).
    engine_factory: Callable[[BridgeOwner], Continuity] | None = None
    cwd: str | None = None
    engine: Continuity | None = None
    generation: int = 0
    phase: str = "waiting"
    session: str = ""
    busy: bool = False
    delivering: int = 0
    last_delivery: float = 0.0
    #: The newest queue row pending when a watcher's wake reached the model: its drain presents
    #: every row through it, so the idle tick never wakes for them again.
    covered_seq: int = 0
    #: The same for the watcher's wake being delivered right now (0: none in flight).
    covering_seq: int = 0
    #: The answer to the last session start (``started``, ``read-only``, …), for the record.
    answer: str = ""
    #: Counts the shutdowns that retired this owner's arms (``retire_on_shutdown``).
    retirements: int = 0
    idle_queue: IdleQueue | None = None
    _cond: threading.Condition = attrs.Factory(threading.Condition)
    _said: set[str] = attrs.Factory(set)

    # --- messages ------------------------------------------------------------------------------

    def handle(self, msg: Message) -> None:
        """Act on one shim message (reader thread). Never raises for a well-formed message."""
        kind = msg.type
        if kind == "delivered":
            self.channel.delivered(msg.id, msg.ok, msg.detail)
            return
        if kind == "hello":
            self._hello(msg)
            return
        if kind == "status":
            self._status(msg)
            return
        if self._stale(msg):
            return
        if kind == "session_start":
            self._session_start(msg)
        elif kind == "session_shutdown":
            self._session_shutdown(msg)
        elif kind in ("idle", "busy"):
            self._activity(msg)
        elif kind == "arm":
            self._arm(msg)

    def _stale(self, msg: Message) -> bool:
        """A message naming an older generation is a late callback: answer it, change nothing."""
        gen = msg.generation
        older = gen is not None and (gen < self.generation or (
            gen == self.generation and msg.type == "session_start" and self.phase == "active"))
        if msg.type == "session_start" and gen is None:
            self.channel.error(msg.id, "session_start needs an integer generation")
            return True
        if not older:
            return False
        self.channel.reply(msg.id, ok=False, state="stale",
                           text=f"generation {gen} is older than the active {self.generation}")
        return True

    def _hello(self, msg: Message) -> None:
        version = msg.fields.get("protocol")
        if version != PROTOCOL:
            # Whatever the shim sent is shown only as a short token, never echoed whole.
            shown = (repr(version) if isinstance(version, int | float) and not isinstance(version, bool)
                     else one_line(version, 20) if isinstance(version, str)
                     else type(version).__name__)
            self.channel.error(msg.id, f"protocol {shown} is not supported; this bridge speaks "
                                       f"protocol {PROTOCOL}: update the shim with "
                                       f"fm install {self.harness}")
            return
        cwd = msg.fields.get("cwd")
        if isinstance(cwd, str) and cwd and "\0" not in cwd:
            self.cwd = cwd
        # A restart (``restart: true``) was announced by the shim already: one notice, not two.
        self.channel.send("welcome", protocol=PROTOCOL, bridge_pid=os.getpid(),
                          harness=self.harness, delivery=self.profile.delivery)

    def _session_start(self, msg: Message) -> None:
        assert msg.generation is not None
        with self._cond:
            self.generation = msg.generation
            self.phase = "active"
            if msg.session:
                self.session = msg.session
            self._cond.notify_all()
        state, text = self._ensure_running(resume=True)
        self.answer = state
        self._record()
        self.channel.reply(msg.id, ok=state in ("started", "unchanged"), state=state, text=text)

    def _session_shutdown(self, msg: Message) -> None:
        if msg.reason == "quit":
            self.quit()
            self.channel.reply(msg.id, ok=True, state="quit", text="supervision ended")
            return
        with self._cond:
            self.phase = "handoff"
            self._cond.notify_all()
        self._record()
        if self.profile.retire_on_shutdown and self.engine is not None:
            with self._cond:
                self.retirements += 1
            self.engine.suspend()
        self.channel.reply(msg.id, ok=True, state="handoff",
                           text="waiting for the replacement session")

    def _activity(self, msg: Message) -> None:
        with self._cond:
            self.busy = msg.type == "busy"
            if msg.session:
                self.session = msg.session
            self._cond.notify_all()
        if msg.type == "idle" and self.phase == "active" and self.engine is None:
            # Supervision may have become needed since the session started (a crew was added).
            state, text = self._ensure_running(resume=False)
            if state != self.answer:
                self.answer = state
                self._record()
            if state == "started":
                self._say("info", text)

    def _arm(self, msg: Message) -> None:
        if self.phase in ("quit", "handoff"):
            self.channel.reply(msg.id, ok=False, state="not-armed",
                               text="not armed: this session is shutting down")
            return
        lock = self._lock_state()
        if lock is not None:
            self.channel.reply(msg.id, ok=False, state=lock[0], text=lock[1])
            return
        engine = self.engine
        if engine is not None:
            now = engine.state()
            if now.slot in ("arm", "retained", "retry-scheduled"):
                self.channel.reply(msg.id, ok=True, state="unchanged",
                                   text=f"unchanged: arm pid {now.arm_pid} is already running"
                                   if now.arm_pid else "unchanged: a re-arm retry is scheduled")
                return
            engine.rearm()
            self.channel.reply(msg.id, ok=True, state="started", text="started: re-arming")
            return
        state, text = self._ensure_running(resume=False, explicit=True)
        self.channel.reply(msg.id, ok=state in ("started", "unchanged"), state=state, text=text)

    def _status(self, msg: Message) -> None:
        engine = self.engine
        info: dict[str, object] = {"phase": self.phase, "generation": self.generation}
        if engine is None:
            state = "empty"
        else:
            now = engine.state()
            state = now.slot
            info.update(arm_pid=now.arm_pid, deliveries=now.deliveries,
                        pending=now.pending_deliveries, standing_down=now.standing_down)
        self.channel.reply(msg.id, ok=True, state=state, text=f"{self.phase} generation "
                           f"{self.generation}, engine {state}", engine=info)

    # --- starting ------------------------------------------------------------------------------

    def _ensure_running(self, *, resume: bool, explicit: bool = False) -> tuple[str, str]:
        """Start the engine (or resume it) when this session should supervise; the reply state
        and its one line."""
        from firstmate.host.away import is_away
        from firstmate.store.need import gather_need
        from firstmate.store.scope import primary_scope

        if self.phase != "active":
            return "not-armed", "not armed: this session is shutting down"
        scope = primary_scope(self.home, None, self.env, cwd=self.cwd)
        if not scope.primary:
            return "out-of-scope", f"not a Firstmate primary home ({scope.reason})"
        if is_away(self.home):
            return "away", "away mode is on: the away owner supervises; fm away off to return"
        if not explicit and not gather_need(self.home).needed:
            return "not-needed", "nothing to supervise yet (no crews, checks or sources)"
        taken = self._take_lock()
        if taken is not None:
            return taken
        engine = self.engine
        if engine is not None:
            before = engine.state()
            if resume:
                engine.resume()
            if before.slot != "empty":
                return "unchanged", f"unchanged: arm pid {before.arm_pid} keeps watching"
            if not resume:
                engine.rearm()
            return "started", "started: the watcher is being re-armed"
        engine = self._new_engine()
        refused = engine.start()
        self.engine = engine
        if refused is not None:
            return "read-only", refused
        if self.profile.idle_queue_read and self.idle_queue is None:
            from firstmate.host.bridge.idlequeue import IdleQueue

            self.idle_queue = IdleQueue.start(self)
        return "started", "started: Firstmate supervises this home from this session"

    def _new_engine(self) -> Continuity:
        if self.engine_factory is not None:
            return self.engine_factory(self)
        from firstmate.continuity.engine import Continuity

        return Continuity.for_session(
            Session(self.home, self.harness, self.env), self.host,
            display_name=self.display_name or None,
            readiness_timeout=self.profile.readiness_timeout, observer=self._observe)

    def _take_lock(self) -> tuple[str, str] | None:
        """Take the session lock for the harness; None when held, else the reply."""
        from firstmate.base.errors import FirstmateError
        from firstmate.continuity import session_lock

        try:
            session_lock.acquire(self.home, self.env)
        except session_lock.SessionLockHeld as exc:
            return ("read-only", f"read-only: another live session (pid {exc.holder_pid}) holds "
                                 "this home's session lock")
        except FirstmateError as exc:
            return "failed", f"the session lock could not be taken: {exc}"
        return None

    def _lock_state(self) -> tuple[str, str] | None:
        """For ``arm``: None when this session owns (or can take) the lock."""
        from firstmate.continuity import session_lock

        ins = session_lock.inspect(self.home)
        if ins.record is not None and session_lock.owned_by_self(ins.record, env=self.env):
            return None
        if ins.state == "held":
            return ("read-only", f"read-only: the session lock is held by live harness pid "
                                 f"{ins.pid}")
        taken = self._take_lock()
        if taken is not None and taken[0] == "failed":
            return "not-armed", f"not armed: no live lock holder ({taken[1]})"
        return taken

    # --- delivery ------------------------------------------------------------------------------

    def deliver(self, text: str, *, covers: bool = False,
                unless_covered: int | None = None) -> DeliveryReceipt:
        """Hand *text* to the model through the shim, in an active generation, exactly once.

        A watcher's wake (*covers*) stands for every row queued when it goes out: the drain it
        asks for presents them all. The idle tick's wake for row *unless_covered* is not sent
        when such a wake already went out (or is going out) for that row."""
        from firstmate.host.away import is_away

        timeout = env_int(self.env, DELIVER_TIMEOUT_ENV,
                          int(DEFAULT_DELIVER_TIMEOUT * 1000)) / 1000.0
        deadline = time.monotonic() + HOLD_LIMIT
        # Read before the wake goes out: a row queued after it may be appended after the drain.
        upto = self._queue_end() if covers else 0
        with self._cond:
            if unless_covered is not None and unless_covered <= max(self.covered_seq,
                                                                    self.covering_seq):
                from firstmate.host.bridge.idlequeue import COVERED

                return DeliveryReceipt(False, COVERED)
            self.delivering += 1
            self.covering_seq = max(self.covering_seq, upto)
            retirements = self.retirements
        delivered = False
        try:
            while True:
                with self._cond:
                    while self.phase in ("waiting", "handoff"):
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return DeliveryReceipt(False, "no active session to deliver to; the "
                                                          "wake stays queued")
                        self._cond.wait(left)
                    if self.phase == "quit":
                        return DeliveryReceipt(False, "the harness quit; the wake stays queued")
                    if self.retirements != retirements:
                        # Its successor was retired with the session: the watcher the resumed
                        # engine starts presents these rows (they stay queued), once.
                        return DeliveryReceipt(False, "superseded: the arms were retired with "
                                                      "the session; the rows stay queued for "
                                                      "the resumed watcher")
                    generation, session = self.generation, self.session
                if is_away(self.home):
                    return DeliveryReceipt(False, "away mode: the away owner handles it; the "
                                                  "wake stays queued")
                answer = self.channel.deliver(text, generation=generation, session=session,
                                              timeout=timeout)
                if answer.ok:
                    self.last_delivery = time.monotonic()
                    delivered = True
                    return DeliveryReceipt(True, answer.detail or "accepted")
                with self._cond:
                    replaced = answer.answered and (
                        self.generation != generation or self.phase == "handoff")
                if not replaced:
                    return DeliveryReceipt(False, answer.detail or "the shim refused it")
                # The session was being replaced: the new generation gets this wake.
        finally:
            with self._cond:
                self.delivering -= 1
                if upto:
                    # Watcher wakes go out one at a time (the engine's delivery thread).
                    self.covering_seq = 0
                    if delivered:
                        self.covered_seq = max(self.covered_seq, upto)

    def _queue_end(self) -> int:
        """The newest queued row's sequence; 0 when the queue cannot be read (nothing is then
        taken as covered, so the idle tick still wakes for owed rows)."""
        from firstmate.store.database import Store, last_seq

        try:
            db = Store(self.home)
            try:
                with db.reading() as conn:
                    return last_seq(conn)
            finally:
                db.close()
        except Exception:
            return 0

    # --- ending ------------------------------------------------------------------------------

    def quit(self) -> None:
        """Terminal: stop every arm, release held deliveries (their rows stay queued)."""
        with self._cond:
            if self.phase == "quit":
                return
            self.phase = "quit"
            self._cond.notify_all()
        if self.idle_queue is not None:
            self.idle_queue.stop()
            self.idle_queue = None
        self.channel.fail_all("the harness quit")
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close(stop_arm=True)
        # A session_start after this (a harness that reported quit, then started a session in
        # the same process) builds a fresh engine.
        self._record()

    # --- helpers -------------------------------------------------------------------------------

    def _observe(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(f"fm bridge {self.harness}: {line}\n")
            sys.stderr.flush()

    def _say(self, level: str, text: str) -> None:
        self.channel.notice(level, text)

    def _record(self) -> None:
        """``state/bridge-<harness>.json``: which generation of which process is active."""
        record = {"harness": self.harness, "harness_pid": _holder_pid(self.env),
                  "bridge_pid": os.getpid(), "generation": self.generation,
                  "phase": self.phase, "answer": self.answer,
                  "updated_at": round(time.time(), 3)}
        with contextlib.suppress(OSError, ValueError):
            if self.home.state.is_dir():
                atomic_write(self.home.state / f"bridge-{self.harness}.json",
                             (json.dumps(record, sort_keys=True) + "\n").encode())


def _holder_pid(env: Mapping[str, str]) -> int | None:
    return decimal(env.get("FM_SESSION_HOLDER_PID", ""), minimum=2, maximum=PID_MAX)


@attrs.define(eq=False)
class ShimDelivery:
    """The bridge's own ``firstmate_deliver_wake``: wakes for this harness process go through the
    shim. Registered on the bridge's plugin host only."""

    owner: BridgeOwner

    @hookimpl(tryfirst=True)
    def firstmate_deliver_wake(self, wake: WakeDelivery,
                               session: Session) -> DeliveryReceipt | None:
        if session.harness != self.owner.harness or session.owner_pid != os.getpid():
            return None
        return self.owner.deliver(wake.text, covers=True)


__all__ = ["DELIVER_TIMEOUT_ENV", "HOLD_LIMIT", "PHASES", "BridgeOwner", "ShimDelivery"]
