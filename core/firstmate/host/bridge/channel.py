"""The shim connection: one writer lock, request ids, and the delivery round trip.

The bridge answers the shim from the reader thread and asks it to deliver from the engine's
delivery thread, so every write goes through one lock and every line is written whole.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from typing import BinaryIO

import attrs

from firstmate.base.waketext import one_line
from firstmate.host.bridge.protocol import encode

#: Seconds the shim has to answer a ``deliver`` (FM_BRIDGE_DELIVER_TIMEOUT_MS).
DEFAULT_DELIVER_TIMEOUT = 30.0


@attrs.frozen
class DeliveryAnswer:
    """What the shim said about one ``deliver``: ``answered`` False means it never replied."""

    answered: bool
    ok: bool = False
    detail: str = ""


@attrs.define(eq=False)
class Channel:
    out: BinaryIO
    _lock: threading.Lock = attrs.Factory(threading.Lock)
    _ids: itertools.count[int] = attrs.Factory(lambda: itertools.count(1))
    _waiting: dict[str, tuple[threading.Event, list[DeliveryAnswer]]] = attrs.Factory(dict)
    #: False once the output pipe broke (the shim is gone): writes become no-ops.
    open: bool = True

    def send(self, kind: str, **fields: object) -> bool:
        """Write one message; False when the shim can no longer be reached."""
        line = encode(kind, **fields)
        with self._lock:
            if not self.open:
                return False
            try:
                self.out.write(line)
                self.out.flush()
            except (OSError, ValueError):
                self.open = False
                return False
        return True

    def reply(self, ident: str | None, *, ok: bool, state: str, text: str = "",
              **extra: object) -> None:
        if ident is not None:
            self.send("reply", id=ident, ok=ok, state=state, text=one_line(text, 600), **extra)

    def error(self, ident: str | None, message: str) -> None:
        self.send("error", id=ident, message=one_line(message, 600))

    def notice(self, level: str, text: str) -> None:
        self.send("notice", level=level, text=one_line(text, 600))

    def deliver(self, text: str, *, generation: int, session: str,
                timeout: float = DEFAULT_DELIVER_TIMEOUT) -> DeliveryAnswer:
        """Ask the shim to deliver *text* and wait (bounded) for its ``delivered``."""
        ident = f"d-{next(self._ids)}"
        done = threading.Event()
        box: list[DeliveryAnswer] = []
        with self._lock:
            self._waiting[ident] = (done, box)
        try:
            if not self.send("deliver", id=ident, generation=generation, text=text,
                             session=session):
                return DeliveryAnswer(False, detail="the shim is gone")
            if not done.wait(timeout):
                return DeliveryAnswer(False, detail=f"the shim did not answer within {timeout:g}s")
            return box[0]
        finally:
            with self._lock:
                self._waiting.pop(ident, None)

    def delivered(self, ident: str | None, ok: bool, detail: str) -> bool:
        """Record the shim's answer to ``deliver`` *ident*; False for an unknown id."""
        with self._lock:
            waiting = self._waiting.get(ident or "")
        if waiting is None:
            return False
        done, box = waiting
        box.append(DeliveryAnswer(True, ok, detail))
        done.set()
        return True

    def fail_all(self, detail: str) -> None:
        """Release every delivery still waiting for an answer (the harness is ending)."""
        with self._lock:
            waiting = list(self._waiting.values())
        for done, box in waiting:
            with contextlib.suppress(IndexError):
                if not box:
                    box.append(DeliveryAnswer(False, detail=detail))
            done.set()


__all__ = ["DEFAULT_DELIVER_TIMEOUT", "Channel", "DeliveryAnswer"]
