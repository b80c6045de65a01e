"""The idle queue tick (a bridge profile's ``idle_queue_read``): rows owed to main get one wake while the session sits idle.

A wake can end up owed without a delivery (it closed while a replacement session was loading, or
the harness refused the follow-up). While the harness is idle and nothing is being delivered, the
tick reads the queue once (bounded by the queue's lock timeout) and, when main has rows it can
present that are older than one tick, delivers one wake naming the oldest and how many more wait.
It does so once per oldest row, and never for a row a watcher's wake that reached the model
already stood for (that wake's drain presents every row queued when it went out). Three failed
reads in a row deliver one ``watcher: FAILED - could not read the wake queue`` until a read
succeeds again.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import attrs

from firstmate.base.envnum import env_int

if TYPE_CHECKING:
    from firstmate.host.bridge.owner import BridgeOwner
    from firstmate.store.queuestatus import QueueStatus

DEFAULT_TICK = 15.0
FAILED_READS = 3
READ_FAILED = "watcher: FAILED - could not read the wake queue"
#: Why the idle tick's wake was not sent: a watcher's wake already stands for its rows.
COVERED = "covered: a delivered wake already stands for these rows"


@attrs.define(eq=False)
class IdleQueue:
    owner: BridgeOwner
    tick: float = DEFAULT_TICK
    #: Whether the harness was installed with the firstmate MCP server: the wake names its tools.
    tools: bool = False
    #: The oldest row a wake was already delivered for.
    announced_seq: int = 0
    failures: int = 0
    failure_said: bool = False
    #: The healthy watcher seen last, and since when (monotonic).
    _watcher: tuple[str, float] | None = None
    _stop: threading.Event = attrs.Factory(threading.Event)
    _thread: threading.Thread | None = None

    @classmethod
    def start(cls, owner: BridgeOwner) -> IdleQueue:
        # The tick and its knob are the harness's (BridgeProfile.idle_queue_tick_*).
        profile = owner.profile
        tick_ms = profile.idle_queue_tick_ms
        if profile.idle_queue_tick_env:
            tick_ms = env_int(owner.env, profile.idle_queue_tick_env, tick_ms)
        tick = tick_ms / 1000.0
        from firstmate.plugin.installrecord import mcp_installed

        made = cls(owner, tick, mcp_installed(owner.home, owner.harness))
        made._thread = threading.Thread(target=made._run, name="fm-bridge-idle-queue",
                                        daemon=True)
        made._thread.start()
        return made

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.tick):
            if self.due():
                self.step()

    def due(self) -> bool:
        """Idle, active, nothing in flight, the last delivery at least a tick old, and a
        healthy watcher that has run for a tick (successor first: a watcher just started may
        still present these rows itself, so a wake from here would be a second one)."""
        owner = self.owner
        return (owner.phase == "active" and not owner.busy and owner.delivering == 0
                and time.monotonic() - owner.last_delivery >= self.tick
                and self._watcher_settled())

    def _watcher_settled(self) -> bool:
        from firstmate.store.health import watcher_health
        from firstmate.store.identity import ProcessIdentity

        try:
            health = watcher_health(self.owner.home, self.owner.env)
        except Exception:  # unreadable state: the read below reports it
            return True
        ident = ProcessIdentity.parse(health.identity or "") if health.healthy else None
        if ident is None:
            self._watcher = None
            return False
        # Healthy for a whole tick as seen from here: its first poll (where a watcher presents
        # rows that waited through downtime) is long done.
        if self._watcher is None or self._watcher[0] != ident.token():
            self._watcher = (ident.token(), time.monotonic())
        return time.monotonic() - self._watcher[1] >= self.tick

    def step(self) -> str | None:
        """One read; the text it delivered, if any."""
        before = self.announced_seq
        text = self.decide(self._read())
        if text is None:
            return None
        row = self.announced_seq if self.announced_seq != before else None  # None: read failure
        receipt = self.owner.deliver(text, unless_covered=row)
        if receipt.detail == COVERED:
            # A watcher's wake stands for the row (the model drains it): no second wake. Should
            # that wake not reach the model after all, the next tick names the row again.
            self.announced_seq = before
            return None
        return text

    def _read(self) -> QueueStatus | None:
        from firstmate.store import queuestatus
        from firstmate.store.database import Store

        try:
            db = Store(self.owner.home)
            try:
                return queuestatus.query(db)
            finally:
                db.close()
        except Exception:  # any read failure counts; the third in a row is announced
            return None

    def decide(self, status: QueueStatus | None, now: float | None = None) -> str | None:
        """The wake text this reading calls for (None: nothing to say)."""
        from firstmate.base.waketext import compose
        from firstmate.watch.sources.queued import reason_line

        if status is None:
            self.failures += 1
            if self.failures >= FAILED_READS and not self.failure_said:
                self.failure_said = True
                return compose((), READ_FAILED, self.owner.display_name, self.tools)
            return None
        self.failures, self.failure_said = 0, False
        oldest = status.oldest
        if status.pending_main <= 0 or oldest is None or oldest.seq <= self.announced_seq:
            return None
        if (time.time() if now is None else now) - oldest.at < self.tick:
            return None  # the watcher wakes for fresh rows itself
        self.announced_seq = oldest.seq
        more = status.pending_main - 1
        line = reason_line(oldest.kind, oldest.payload)
        if more > 0:
            line += f" (and {more} more queued row{'s' if more != 1 else ''})"
        return compose((line,), None, self.owner.display_name, self.tools)


__all__ = ["COVERED", "DEFAULT_TICK", "FAILED_READS", "READ_FAILED", "IdleQueue"]
