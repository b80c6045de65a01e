"""Ringing a home's doorbell: the writer's half of :mod:`firstmate.store.doorbell`, free of attrs.

Writers ring after their write commits; ringing is best effort and never blocks (a missed ring
costs the watcher at most one poll interval). On Linux the bell is an abstract unix datagram
socket named after the state directory; elsewhere it is the file ``state/watcher.bell``.
"""

from __future__ import annotations

import os
import sys

from firstmate.base.fasthash import sha256_hex

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate.store.home import Home

#: Abstract unix sockets exist only on Linux (a plain variable, so type checkers keep both paths).
ABSTRACT_NAMESPACE: bool = sys.platform.startswith("linux")


def address_of(state: str) -> str | bytes:
    """The bell of the state directory *state* (an absolute path, as ``Path.absolute`` gives)."""
    if ABSTRACT_NAMESPACE:
        digest = sha256_hex(state.encode())[:32]
        return b"\0firstmate-bell-" + digest.encode()
    return os.path.join(state, "watcher.bell")


def address(home: Home) -> str | bytes:
    from pathlib import Path

    if ABSTRACT_NAMESPACE:
        return address_of(str(Path(home.state).absolute()))
    return str(Path(home.state) / "watcher.bell")


def ring_address(addr: str | bytes) -> None:
    """Wake whoever listens on *addr*. Never raises, never blocks."""
    # _socket, not socket: the socket module builds enums at import, which a hot path cannot pay.
    import _socket

    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM)
    except OSError:
        return
    try:
        sock.setblocking(False)
        sock.sendto(b"!", addr)
    except OSError:
        pass
    finally:
        sock.close()


def ring(home: Home) -> None:
    """Wake the home's watcher if one is listening. Never raises, never blocks."""
    try:
        addr = address(home)
    except OSError:  # the working directory vanished (a relative home): nobody to wake
        return
    ring_address(addr)


__all__ = ["ABSTRACT_NAMESPACE", "address", "address_of", "ring", "ring_address"]
