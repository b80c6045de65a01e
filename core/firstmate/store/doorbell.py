"""A doorbell that wakes a waiting watcher the moment something durable changes.

The watcher binds one unix datagram socket per home, ``state/watcher.bell``; writers ring it
after their write commits. Ringing is best effort and never blocks: a missed ring costs at most
one ``FM_POLL`` interval, because the watcher re-reads everything on every poll anyway.

**Who can ring.** The socket is a file in the private ``state/`` (0700), bound 0600, so only the
home's owner (and root) can reach it, and only the watcher holding the singleton binds it (it
replaces whatever a killed predecessor left at the path). No other user can take the address
first or ring it.

**What a flood costs.** A ring is one byte and says only "look again": the ring that ends a
wait is read alone (the wake pays for one ``recv``, not for reading the queue dry), and every
ring behind it is read at once by the next wait, which answers them all with one more poll.
Past a burst of :data:`BURST` answered rings, the bell
answers at most :data:`RATE` a second, and while it may not answer it does not even watch the
socket (rings pile up in the kernel's queue, whose senders never block), so a runaway writer
costs the watcher a bounded number of polls a second, however fast it rings.

The ringing side (:func:`ring`, :func:`address`) lives in the attrs-free :mod:`firstmate.fast.bell`
and is re-exported here.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import stat
import struct
import time

import attrs

from firstmate.fast.bell import address, reach, ring
from firstmate.store.home import Home, private_umask

#: Rings answered at once before the rate applies (a burst of crews reporting together).
BURST = 16
#: Rings answered per second, at most, once the burst is spent.
RATE = 20.0
#: Datagrams read per answer at most: a writer ringing as fast as the bell drains cannot keep
#: the watcher reading (the kernel queues a few hundred).
DRAIN_MAX = 1024
#: A ``struct timeval`` (the receive timeout a wait sets), the least wait that sets one, and
#: the longest (a longer one ends then, unrung: the watcher waits again).
_TIMEVAL = struct.Struct("@ll")
_LEAST, _LONGEST = 1e-6, 86400.0


@attrs.define(eq=False)
class Doorbell:
    """The listening side, owned by the watcher that holds the singleton lock."""

    home: Home
    _sock: socket.socket | None = None
    #: (device, inode) of the socket file this bell bound: only that file is removed at close.
    _bound: tuple[int, int] | None = None
    #: Rings that may still be answered at once, and when that was last counted (monotonic).
    _tokens: float = float(BURST)
    _counted: float = attrs.Factory(time.monotonic)
    #: The last answer read only the ring that ended its wait: others may wait behind it.
    _unread: bool = False

    def open(self) -> bool:
        """Bind the bell; False (polling only) when its path cannot take a socket."""
        if self._sock is not None:
            return True
        path = address(self.home)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            # A socket left by a killed predecessor (or anything else at the path: only the
            # singleton's holder binds here) is replaced; a directory there is not.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            with private_umask():  # 0600 from the start: nobody else may connect, ever
                reach(path, sock.bind)
            st = os.lstat(path)
            if not stat.S_ISSOCK(st.st_mode):
                raise OSError(f"{path} is not the socket just bound")
        except OSError:
            sock.close()
            return False
        sock.setblocking(True)  # (its waits are bounded by a receive timeout: see wait)
        self._sock = sock
        self._bound = (st.st_dev, st.st_ino)
        return True

    def _hold(self) -> float:
        """Seconds until a ring may be answered (0: now)."""
        now = time.monotonic()
        self._tokens = min(float(BURST), self._tokens + (now - self._counted) * RATE)
        self._counted = now
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / RATE

    def wait(self, timeout: float) -> bool:
        """Wait up to *timeout* seconds for a ring; True when rung. Reads the ring that ends the
        wait; rings left behind the last one read answer this wait at once, all together."""
        timeout = min(max(0.0, timeout), _LONGEST)
        if self._sock is None and not self.open():
            time.sleep(timeout)
            return False
        assert self._sock is not None
        hold = self._hold()
        if hold > 0:
            # Rate-limited: the socket is not watched meanwhile, so a flood costs nothing here.
            time.sleep(min(hold, timeout))
            if hold >= timeout:
                return False
            timeout -= hold
            self._hold()
        if self._unread:
            # Rings behind the one read last came with it or during its poll: one answer for all.
            self._unread = False
            if self._read_all():
                self._tokens -= 1.0
                return True
        # The wait is the read itself, bounded by the socket's receive timeout: a ring wakes us
        # out of one system call, not a select and then a recv. Only the ring that woke us is
        # read (reading until the queue is empty ends in an exception, which costs a waking
        # process several times as much); the next wait reads any behind it.
        try:
            if timeout < _LEAST:  # (a receive timeout of zero would wait for ever)
                self._sock.recv(64, socket.MSG_DONTWAIT)
            else:
                whole = int(timeout)
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _TIMEVAL.pack(
                    whole, int((timeout - whole) * 1e6)))
                self._sock.recv(64)
        except BlockingIOError:  # (the time ran out, and nobody rang)
            return False
        self._unread = True
        self._tokens -= 1.0
        return True

    def _read_all(self) -> bool:
        """Read every ring waiting (at most :data:`DRAIN_MAX`); True when there was one."""
        assert self._sock is not None
        found = False
        for _ in range(DRAIN_MAX):
            try:
                self._sock.recv(64, socket.MSG_DONTWAIT)
            except InterruptedError:
                continue
            except OSError:  # (BlockingIOError: every ring is read)
                break
            found = True
        return found

    def pending(self) -> bool:
        """True when a ring waits that may be answered now; reads nothing (one ``select``)."""
        if self._sock is None or self._hold() > 0:
            return False
        try:
            ready, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(ready)

    def fileno(self) -> int | None:
        """The bound socket (readable while a ring waits), for a wait on something else too;
        None while rings may not be answered yet (a flood must not end that wait at once)."""
        if self._sock is None or self._hold() > 0:
            return None
        return self._sock.fileno()

    def close(self) -> None:
        if self._sock is None:
            return
        self._sock.close()
        self._sock = None
        bound, self._bound = self._bound, None
        path = address(self.home)
        with contextlib.suppress(OSError):
            st = os.lstat(path)
            if (st.st_dev, st.st_ino) == bound:  # (never a successor's socket)
                os.unlink(path)


__all__ = ["BURST", "DRAIN_MAX", "RATE", "Doorbell", "address", "ring"]
