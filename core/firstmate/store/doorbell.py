"""A doorbell that wakes a waiting watcher the moment something durable changes.

The watcher binds one unix datagram socket per home; writers ring it after their write commits.
Ringing is best effort and never blocks: a missed ring costs at most one ``FM_POLL`` interval,
because the watcher re-reads everything on every poll anyway. On Linux the socket lives in the
abstract namespace (no file to clean up, no path-length limit); elsewhere it is a file in state/.
The ringing side (:func:`ring`, :func:`address`) lives in the attrs-free :mod:`firstmate.base.bell`
and is re-exported here.
"""

from __future__ import annotations

import select
import socket
from pathlib import Path

import attrs

from firstmate.base.bell import ABSTRACT_NAMESPACE, address, ring
from firstmate.store.home import Home


@attrs.define(eq=False)
class Doorbell:
    """The listening side, owned by the watcher that holds the singleton lock."""

    home: Home
    _sock: socket.socket | None = None

    def open(self) -> bool:
        """Bind the bell; False (polling only) when another process still holds the address."""
        if self._sock is not None:
            return True
        addr = address(self.home)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            if isinstance(addr, str):
                Path(addr).unlink(missing_ok=True)
            sock.bind(addr)
        except OSError:
            sock.close()
            return False
        sock.setblocking(False)
        self._sock = sock
        return True

    def wait(self, timeout: float) -> bool:
        """Wait up to *timeout* seconds for a ring; True when rung. Drains queued rings."""
        if self._sock is None and not self.open():
            select.select([], [], [], max(0.0, timeout))
            return False
        assert self._sock is not None
        ready, _, _ = select.select([self._sock], [], [], max(0.0, timeout))
        if not ready:
            return False
        while True:
            try:
                self._sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return True

    def pending(self) -> bool:
        """True when a ring waits to be answered; drains nothing (cheap: one ``select``)."""
        if self._sock is None:
            return False
        try:
            ready, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(ready)

    def fileno(self) -> int | None:
        """The bound socket (readable while a ring waits), for a wait on something else too."""
        return None if self._sock is None else self._sock.fileno()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            addr = address(self.home)
            if isinstance(addr, str):
                Path(addr).unlink(missing_ok=True)


__all__ = ["ABSTRACT_NAMESPACE", "Doorbell", "address", "ring"]
