"""Ringing a home's doorbell: the writer's half of :mod:`firstmate.store.doorbell`, free of attrs.

Writers ring after their write commits; ringing is best effort and never blocks (a missed ring
costs the watcher at most one poll interval). The bell is the unix datagram socket
``state/watcher.bell``: a file inside the private ``state/`` (0700), bound 0600 by the watcher
that holds the singleton, so only the home's owner (and root) can bind it or ring it. An
address derived from the path in a namespace everyone shares (the abstract one) would let any
local user take the bell first, or flood it.

A socket's address holds about a hundred bytes; a longer path is reached through the state
directory's descriptor, ``/proc/self/fd/<fd>/watcher.bell`` (Linux), which names the same file.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket
    from collections.abc import Callable
    from typing import TypeVar

    from firstmate.store.home import Home

    T = TypeVar("T")

#: The socket's name inside ``state/``.
NAME = "watcher.bell"
#: The longest path a unix socket address holds (``sun_path`` is 108 bytes on Linux, with its
#: terminating NUL; other systems offer about as much or less).
MAX_ADDRESS = 103


def address_of(state: str) -> str:
    """The bell of the state directory *state*."""
    return os.path.join(state, NAME)


def address(home: Home) -> str:
    return address_of(os.fspath(home.state))


def reach(path: str, use: Callable[[str], T]) -> T:
    """``use(addr)`` with an address that names the socket file *path*: *path* itself when it
    fits a socket address, else the same file through a descriptor of its directory (held
    open during *use*). Raises OSError when the directory cannot be opened."""
    if len(path.encode("utf-8", "surrogateescape")) <= MAX_ADDRESS:
        return use(path)
    head, name = os.path.split(path)
    fd = os.open(head or ".", getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return use(f"/proc/self/fd/{fd}/{name}")
    finally:
        os.close(fd)


#: This process's ringing socket, made at its first ring and kept: ``(pid, socket)``. (An
#: unconnected datagram socket names its target on each send, so one serves every bell.)
_ringer: tuple[int, _socket.socket] | None = None


def ring_address(addr: str) -> None:
    """Wake whoever listens on the socket file *addr*. Never raises, never blocks."""
    global _ringer
    pid = os.getpid()
    if _ringer is None or _ringer[0] != pid:  # (a forked child makes its own)
        # _socket, not socket: the socket module builds enums at import, which a hot path
        # cannot pay (and only the first ring imports it: every later one reuses the socket).
        import _socket

        try:
            made = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM | _socket.SOCK_NONBLOCK
                                  | _socket.SOCK_CLOEXEC)
        except (OSError, AttributeError):  # (a platform without the flags: a plain one)
            try:
                made = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM)
                made.setblocking(False)
            except OSError:
                return
        _ringer = (pid, made)
    sock = _ringer[1]
    try:  # noqa: SIM105 - contextlib costs the append path an import
        reach(addr, lambda target: sock.sendto(b"!", target))
    except OSError:  # nobody listens (no watcher, or a stale socket), or the queue is full
        pass


def ring(home: Home) -> None:
    """Wake the home's watcher if one is listening. Never raises, never blocks."""
    ring_address(address(home))


__all__ = ["MAX_ADDRESS", "NAME", "address", "address_of", "reach", "ring", "ring_address"]
