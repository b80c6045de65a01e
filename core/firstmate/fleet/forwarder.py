"""``fm fleet forward``: a joined home's long-lived forwarder, its crews' events to the fleet.

One per home (``state/fleet/forward.lock``). Started by ``fm fleet join``; any report that finds
it gone starts it again (:mod:`firstmate.fast.fleetbell`). It waits on its doorbell, which every
``fm crew status``, ``fm crew turn-ended`` and registration change rings after naming its crew
in the change journal; a ring looks only at the crews named since (:mod:`firstmate.fleet.changed`),
and a full pass over every crew's files runs at start and every ``FM_FLEET_RESCAN`` seconds (15;
a line or a turn end written by hand names no crew and rings nothing). Each crew with something
new gets a pump that publishes its events in order, one at a time — the next
only once JetStream acknowledged the last, so a crew's order holds through any failure — and
saves the crew's cursor after each acknowledged batch (:mod:`firstmate.fleet.outbox`). Crews
pump concurrently. A publish that fails (the server down, the stream full) is sent again with
the same message id after a backoff that doubles to 2 s; nothing is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Mapping
from typing import Any

from firstmate.base.envnum import env_float
from firstmate.base.exitcodes import ExitCode
from firstmate.fleet import config, names, natsconn, paths, procs, wire
from firstmate.fleet.changed import ChangedCrews
from firstmate.fleet.outbox import Outbox
from firstmate.store.home import Home
from firstmate.store.ledgers import BoundedLog

RESCAN_ENV = "FM_FLEET_RESCAN"
DEFAULT_RESCAN = 15.0
#: Publishes in flight at once, over all crews.
IN_FLIGHT = 64
ROLE = "fleet-forward"


def run(home: Home, env: Mapping[str, str]) -> int:
    """The forwarder's whole life; 0 when another one already runs or it was stopped."""
    with procs.singleton(home, paths.FORWARD_LOCK, ROLE) as mine:
        return _run(home, env) if mine else ExitCode.OK


def _run(home: Home, env: Mapping[str, str]) -> int:
    log = paths.log(home, "forward", env)
    member = config.load_member(os.fspath(home.root), env)
    if member is None:
        # A copied home, or one whose membership was removed: reports stop trying.
        log.append("forwarder: this home has not joined a fleet here; reports stay local "
                   "(fm fleet join URL --creds FILE joins it)")
        with contextlib.suppress(OSError):
            os.unlink(paths.path(home, paths.FORWARD_LOCK))
        return ExitCode.STATE
    outbox = Outbox.open(home, member.fleet, member.host)
    bell = _bind(paths.path(home, paths.FORWARD_BELL))
    try:
        forwarder = Forwarder(member, outbox, log, env_float(env, RESCAN_ENV, DEFAULT_RESCAN))
        asyncio.run(forwarder.main(bell))
    finally:
        bell.close()
        with contextlib.suppress(OSError):
            os.unlink(paths.path(home, paths.FORWARD_BELL))
    return ExitCode.OK


def _bind(path: str) -> socket.socket:
    """The forwarder's doorbell: a datagram socket only this user can ring (state/ is 0700)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a dead forwarder's socket (we hold the lock: nobody else binds it)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    old = os.umask(0o077)
    try:
        if len(path.encode()) <= 103:
            sock.bind(path)
        else:  # (too long for a socket address: reached through the directory's descriptor)
            head, name = os.path.split(path)
            dfd = os.open(head, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                sock.bind(f"/proc/self/fd/{dfd}/{name}")
            finally:
                os.close(dfd)
    finally:
        os.umask(old)
    sock.setblocking(False)
    return sock


class Forwarder:
    def __init__(self, member: config.Member, outbox: Outbox, log: BoundedLog,
                 rescan: float) -> None:
        self.member = member
        self.outbox = outbox
        self.changed = ChangedCrews(outbox, rescan)
        self.log = log
        self.key = bytes.fromhex(member.key)
        self.stop = asyncio.Event()
        self.rung = asyncio.Event()
        self.pumps: dict[str, asyncio.Task[None]] = {}
        self.gate = asyncio.Semaphore(IN_FLIGHT)
        self.js: Any = None
        self.failing = False
        self.sent = 0

    async def main(self, bell: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self.stop.set)
        loop.add_reader(bell.fileno(), self._ring, bell)
        member = self.member
        self.log.append(f"forwarder: started (pid {os.getpid()}) for host {member.host} of "
                        f"fleet {member.fleet} at {', '.join(member.urls)}")
        nc = await natsconn.connected(
            self.stop, lambda text: self.log.append(f"forwarder: {text}"), member.urls,
            member.auth, name=f"fm-forward-{member.host}",
            inbox_prefix=names.inbox_prefix(member.fleet, member.host))
        if nc is None:
            return
        self.js = nc.jetstream()
        try:
            hello = wire.Event(member.fleet, member.host, self.outbox.epoch, names.HELLO, "",
                               time.time_ns(), round(time.time(), 3))
            if await self._send(hello):
                await self._watch()
        finally:
            for task in self.pumps.values():
                task.cancel()
            await asyncio.gather(*self.pumps.values(), return_exceptions=True)
            for name, _pane in self.outbox.registered():
                with contextlib.suppress(Exception):
                    self.outbox.save(name)
            with contextlib.suppress(Exception):
                await nc.close()
            self.log.append(f"forwarder: stopped (pid {os.getpid()}); {self.sent} events sent")

    def _ring(self, bell: socket.socket) -> None:
        while True:
            try:
                bell.recv(64)
            except OSError:
                break
        self.rung.set()

    async def _watch(self) -> None:
        while not self.stop.is_set():
            self.rung.clear()
            # (a crew whose pump has not finished, or failed, is looked at again)
            busy = [name for name, task in self.pumps.items()
                    if not task.done() or task.cancelled() or task.exception() is not None]
            for name in [name for name, task in self.pumps.items() if task.done()]:
                del self.pumps[name]
            for name in self.changed.pending(time.time(), busy):
                task = self.pumps.get(name)
                if task is None or task.done():
                    self.pumps[name] = asyncio.ensure_future(self._pump(name))
            waits = {asyncio.ensure_future(self.rung.wait()),
                     asyncio.ensure_future(self.stop.wait())}
            _done, rest = await asyncio.wait(waits, timeout=self.changed.next_full(time.time()),
                                             return_when=asyncio.FIRST_COMPLETED)
            for waiting in rest:
                waiting.cancel()

    async def _pump(self, name: str) -> None:
        while not self.stop.is_set():
            batch = self.outbox.take(name)
            if not batch:
                return
            for event, cursor in batch:
                if not await self._send(event):
                    return
                self.outbox.advance(name, cursor)
            self.outbox.save(name)

    async def _send(self, event: wire.Event) -> bool:
        """Publish *event* until JetStream acknowledges it (the same id every time); False when
        the forwarder was stopped first."""
        subject, body, headers = wire.encode(event, self.key)
        delay = 0.05
        while True:
            try:
                async with self.gate:
                    await self.js.publish(subject, body, timeout=natsconn.PUBLISH_TIMEOUT,
                                          stream=names.stream(event.fleet), headers=headers)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not self.failing:
                    self.failing = True
                    self.log.append(f"forwarder: cannot publish ({type(exc).__name__}: "
                                    f"{' '.join(str(exc).split())[:200]}); retrying, nothing "
                                    "is lost")
                if await natsconn.pause(self.stop, delay):
                    return False
                delay = min(delay * 2, 2.0)
                continue
            if self.failing:
                self.failing = False
                self.log.append("forwarder: publishing again")
            self.sent += 1
            return True


__all__ = ["DEFAULT_RESCAN", "RESCAN_ENV", "Forwarder", "run"]
