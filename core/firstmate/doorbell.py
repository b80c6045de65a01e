"""A doorbell that wakes a waiting watcher the moment something durable changes.

The watcher binds one unix datagram socket per home; writers ring it after their write commits.
Ringing is best effort and never blocks: a missed ring costs at most one ``FM_POLL`` interval,
because the watcher re-reads everything on every poll anyway. On Linux the socket lives in the
abstract namespace (no file to clean up, no path-length limit); elsewhere it is a file in state/.
"""

from __future__ import annotations

import hashlib
import select
import socket
import sys
from pathlib import Path

import attrs

from firstmate.home import Home

#: Abstract unix sockets exist only on Linux (a plain variable, so type checkers keep both paths).
ABSTRACT_NAMESPACE: bool = sys.platform.startswith("linux")


def address(home: Home) -> str | bytes:
    if ABSTRACT_NAMESPACE:
        digest = hashlib.sha256(str(Path(home.state).absolute()).encode()).hexdigest()[:32]
        return b"\0firstmate-bell-" + digest.encode()
    return str(home.state / "watcher.bell")


def ring(home: Home) -> None:
    """Wake the home's watcher if one is listening. Never raises, never blocks."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.sendto(b"!", address(home))
    except OSError:
        pass


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

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            addr = address(self.home)
            if isinstance(addr, str):
                Path(addr).unlink(missing_ok=True)
