"""The continuity engine's outbox: wakes handed to the harness plugin's delivery hook one at a
time, in close order, on a thread of their own (a successor start never waits behind a
delivery). Every delivery's receipt is kept; a failed delivery is recorded, never raised:
restoration has already happened and must not be undone by a delivery problem."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import attrs

from firstmate.plugin.handoff import DeliveryReceipt, WakeDelivery


@attrs.define(eq=False)
class Outbox:
    #: Delivers one wake and says how it went (the engine's call of the delivery hook).
    send: Callable[[WakeDelivery], DeliveryReceipt]
    _queue: queue.Queue[WakeDelivery | None] = attrs.Factory(queue.Queue)
    _receipts: list[tuple[WakeDelivery, DeliveryReceipt]] = attrs.Factory(list)
    _pending: int = 0
    _lock: threading.Lock = attrs.Factory(threading.Lock)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        """Deliver on a thread from now on (:meth:`put` queues)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="fm-continuity-deliver",
                                            daemon=True)
            self._thread.start()

    def stop(self, timeout: float) -> None:
        """Deliver what is queued, then end the thread (waiting at most *timeout*)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)

    def put(self, wake: WakeDelivery) -> None:
        """Queue *wake* behind the ones before it; delivered at once when not started."""
        if self._thread is None:
            self.deliver(wake)
            return
        with self._lock:
            self._pending += 1
        self._queue.put(wake)

    def deliver(self, wake: WakeDelivery) -> DeliveryReceipt:
        """Deliver *wake* now, in this thread."""
        try:
            receipt = self.send(wake)
        except Exception as exc:
            receipt = DeliveryReceipt(False, f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._receipts.append((wake, receipt))
        return receipt

    @property
    def receipts(self) -> list[tuple[WakeDelivery, DeliveryReceipt]]:
        with self._lock:
            return list(self._receipts)

    def counts(self) -> tuple[int, int]:
        """(wakes delivered so far, wakes queued or being delivered now)."""
        with self._lock:
            return len(self._receipts), self._pending

    def _loop(self) -> None:
        while True:
            wake = self._queue.get()
            if wake is None:
                return
            try:
                self.deliver(wake)
            finally:
                with self._lock:
                    self._pending -= 1


__all__ = ["Outbox"]
