"""``fm fleet relay``: the primary's consumer of the fleet's stream.

One per home (``state/fleet/relay.lock``), run and restarted by the fleet supervisor
(:mod:`firstmate.fleet.supervise`). At start it finishes what a crash left half-applied
(:meth:`firstmate.fleet.inbox.Inbox.recover`), makes sure the stream exists and makes its durable
pull consumer anew, so every message it never acknowledged comes again, oldest first. Then it
long-polls (a ``fetch`` that returns the moment a message arrives, never a fixed sleep), checks
each message (:func:`firstmate.fleet.wire.decode`), commits the batch into the home
(:meth:`~firstmate.fleet.inbox.Inbox.commit`, which rings the watcher's doorbell) and only then
acknowledges it to JetStream. A batch that cannot be committed (the disk full, the database
locked past its bound) is tried again, and nothing after it is read meanwhile, so a crew's order
holds. An event that arrives before one it follows (its predecessor went to a fetch whose
connection was lost: a server or cluster node that went away) is held back unacknowledged, and
the consumer is made anew, which delivers everything unacknowledged again, oldest first.

Refused messages — a bad signature, a subject or body naming another host, an unknown host, a
replayed id, a crew name taken by a local crew — are acknowledged (so they are not delivered
again) and not applied. Each host and reason is reported once per relay run: one line in the
triage log and one wake row, ``check: fleet refused <what> from host <H>: <reason>`` (key
``fleet.refused.<H>.<reason>``). ``fm fleet status`` shows the counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Mapping, Sequence
from typing import Any

from firstmate.base.envnum import env_float, env_int
from firstmate.base.errors import FirstmateError
from firstmate.base.exitcodes import ExitCode
from firstmate.base.safepaths import atomic_write
from firstmate.fleet import config, natsconn, paths, procs, wire
from firstmate.fleet.inbox import Gap, Inbox, Incoming, Key, Refusal
from firstmate.store.database import Store, open_store
from firstmate.store.home import Home
from firstmate.store.ledgers import BoundedLog, triage_log

ROLE = "fleet-relay"
#: Most messages one fetch takes.
BATCH_ENV = "FM_FLEET_BATCH"
DEFAULT_BATCH = 256
#: How long one fetch waits for a first message (seconds): a long poll, answered at once.
WAIT_ENV = "FM_FLEET_FETCH_WAIT"
DEFAULT_WAIT = 5.0
#: The stream's size cap in bytes (default none): past it, hosts' publishes are refused and
#: retried, never old messages dropped.
MAX_BYTES_ENV = "FM_FLEET_STREAM_MAX_BYTES"


def run(home: Home, env: Mapping[str, str]) -> int:
    with procs.singleton(home, paths.RELAY_LOCK, ROLE) as mine:
        if not mine:
            return ExitCode.OK
        try:
            return _run(home, env)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(paths.path(home, paths.RELAY_READY))


def _run(home: Home, env: Mapping[str, str]) -> int:
    log = paths.log(home, "relay", env)
    primary = config.load_primary(os.fspath(home.root), env)
    if primary is None:
        log.append("relay: this home serves no fleet here (fm fleet serve or fm fleet use)")
        return ExitCode.STATE
    store = open_store(home)
    try:
        inbox = Inbox(home, store)
        appended = inbox.recover()
        if appended:
            log.append(f"relay: recovered {appended} line(s) a crash left unwritten")
        asyncio.run(Relay(home, env, primary, store, inbox, log).main())
    finally:
        store.close()
    return ExitCode.OK


class Relay:
    def __init__(self, home: Home, env: Mapping[str, str], primary: config.Primary, store: Store,
                 inbox: Inbox, log: BoundedLog) -> None:
        self.home = home
        self.env = env
        self.primary = primary
        self.store = store
        self.inbox = inbox
        self.log = log
        self.stop = asyncio.Event()
        self.reported: set[tuple[str, str]] = set()
        self.reloaded = 0.0
        self.applied = 0
        #: Sequences held back for a missing predecessor: the number that was expected.
        self.tried: dict[Key, int] = {}
        #: Sequences whose predecessors are gone from the stream: taken up where they are.
        self.accept: set[Key] = set()

    async def main(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._reload)
        primary = self.primary
        nc = await natsconn.connected(self.stop, lambda text: self.log.append(f"relay: {text}"),
                                      primary.urls, primary.relay, name="fm-relay")
        if nc is None:
            return
        try:
            sub = await self._subscribe(nc.jetstream())
            if sub is None:
                return
            atomic_write(paths.path(self.home, paths.RELAY_READY), f"{os.getpid()}\n".encode())
            self.log.append(f"relay: consuming fleet {primary.fleet} at "
                            f"{', '.join(primary.urls)} (pid {os.getpid()})")
            await self._consume(nc.jetstream(), sub)
        finally:
            with contextlib.suppress(Exception):
                await nc.close()
            self.log.append(f"relay: stopped (pid {os.getpid()}); {self.applied} events applied")

    async def _subscribe(self, js: Any) -> Any | None:
        """The consumer, once the stream is set up (None when stopped first)."""
        delay = 0.2
        while True:
            try:
                await natsconn.ensure_stream(
                    js, self.primary.fleet, replicas=self.primary.replicas,
                    max_bytes=env_int(self.env, MAX_BYTES_ENV, -1),
                    duplicate_window=env_float(self.env, natsconn.DUPLICATE_WINDOW_ENV,
                                               natsconn.DUPLICATE_WINDOW))
                return await natsconn.fresh_consumer(js, self.primary.fleet)
            except Exception as exc:
                self.log.append(f"relay: cannot set up the stream yet ({type(exc).__name__}: "
                                f"{' '.join(str(exc).split())[:200]}); retrying")
                if await natsconn.pause(self.stop, delay):
                    return None
                delay = min(delay * 2, 5.0)

    async def _consume(self, js: Any, sub: Any) -> None:
        batch = env_int(self.env, BATCH_ENV, DEFAULT_BATCH)
        wait = env_float(self.env, WAIT_ENV, DEFAULT_WAIT)
        failing = False
        while not self.stop.is_set():
            try:
                fetched, msgs = await natsconn.until(self.stop, sub.fetch(batch, timeout=wait))
            except TimeoutError:
                continue
            except Exception as exc:
                if not failing:
                    failing = True
                    self.log.append(f"relay: cannot fetch ({type(exc).__name__}: "
                                    f"{' '.join(str(exc).split())[:200]}); retrying")
                if "consumer" in str(exc).lower() and "not found" in str(exc).lower():
                    sub = await self._resubscribe(js, sub)  # (a server that lost its state)
                    if sub is None:
                        return
                await natsconn.pause(self.stop, 0.5)
                continue
            if not fetched or msgs is None:
                return
            failing = False
            gaps = await self._handle(msgs)
            if gaps is None:
                return
            if gaps:
                # Everything not acknowledged is delivered again, oldest first: the missing
                # predecessors come before what was held.
                self.log.append(f"relay: {len(gaps)} event(s) came before one they follow "
                                "(a delivery lost with a connection); everything not "
                                "acknowledged is delivered again")
                sub = await self._resubscribe(js, sub)
                if sub is None:
                    return

    async def _resubscribe(self, js: Any, sub: Any) -> Any | None:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        return await self._subscribe(js)

    async def _handle(self, msgs: Sequence[Any]) -> list[Gap] | None:
        """Commit *msgs*, then acknowledge them (all but those held back for a missing
        predecessor, which are returned); None when stopped before the commit."""
        incoming: list[Incoming] = []
        refused: list[Refusal] = []
        for msg in msgs:
            try:
                event = wire.decode(self.primary.fleet, msg.subject, msg.headers, msg.data,
                                    self._key_of)
            except wire.Refused as exc:
                refused.append(Refusal(exc.host, exc.code, exc.detail))
                continue
            incoming.append(Incoming(event, int(msg.metadata.sequence.stream)))
        delay = 0.1
        while True:
            try:
                outcome = self.inbox.commit(incoming, refused_before=refused,
                                            accept=set(self.accept))
                break
            except (FirstmateError, sqlite3.Error, OSError) as exc:
                what = exc.message if isinstance(exc, FirstmateError) else str(exc)
                self.log.append(f"relay: cannot commit {len(incoming)} event(s): {what}; "
                                "retrying (nothing is acknowledged meanwhile)")
                if await natsconn.pause(self.stop, delay):
                    return None
                delay = min(delay * 2, 5.0)
        self.applied += outcome.applied
        for host in outcome.hellos:
            self.log.append(f"relay: host {host} connected")
        for refusal in outcome.refused:
            self._report(refusal)
        held = {gap.msg_id for gap in outcome.gaps}
        for msg in msgs:
            if (msg.headers or {}).get(wire.ID_HEADER) in held:
                continue
            with contextlib.suppress(Exception):
                await msg.ack()
        return self._gaps(outcome.gaps)

    def _gaps(self, gaps: Sequence[Gap]) -> list[Gap]:
        """The gaps to have redelivered. A gap still there right after a redelivery means its
        predecessors are gone from the stream (purged by hand): the sequence is taken up where
        it is, and the loss reported once."""
        first: dict[Key, Gap] = {}
        for gap in gaps:
            first.setdefault(gap.key, gap)  # (a sequence's later events wait on the same one)
        seen = set(first)
        for key in [key for key in self.accept if key not in seen]:
            self.accept.discard(key)
        for gap in first.values():
            if self.tried.get(gap.key) == gap.expected:
                self.accept.add(gap.key)
                host, _epoch, crew, kind = gap.key
                self._report(Refusal(host, "events lost from the stream",
                                     f"{kind} {gap.expected}-{gap.got - 1} of crew {crew}"))
            self.tried[gap.key] = gap.expected
        for key in [key for key in self.tried if key not in seen]:
            del self.tried[key]
        return list(gaps)

    def _key_of(self, host: str) -> bytes | None:
        key = self.primary.key_of(host)
        if key is None and time.monotonic() - self.reloaded > 1.0:
            self._reload()  # (a host added since this relay started)
            key = self.primary.key_of(host)
        return key

    def _reload(self) -> None:
        self.reloaded = time.monotonic()
        try:
            found = config.load_primary(os.fspath(self.home.root), self.env)
        except FirstmateError as exc:
            self.log.append(f"relay: cannot reload the fleet configuration: {exc.message}")
            return
        if found is not None:
            self.primary = found

    def _report(self, refusal: Refusal) -> None:
        """Once per host and reason: a triage line and a wake row."""
        host = "".join(c for c in refusal.host if c.isalnum() or c in "_-")[:32] or "unknown"
        slug = refusal.code.replace(" ", "-")
        detail = f" ({refusal.detail})" if refusal.detail else ""
        self.log.append(f"relay: refused a message from host {host}: {refusal.code}{detail}")
        if (host, slug) in self.reported:
            return
        self.reported.add((host, slug))
        line = f"check: fleet refused a message from host {host}: {refusal.code}{detail}"
        with contextlib.suppress(FirstmateError, OSError):
            triage_log(self.home, self.env).append(line)
        from firstmate.store import queue

        try:
            queue.append(self.store, "check", f"fleet.refused.{host}.{slug}", line)
        except (FirstmateError, sqlite3.Error) as exc:
            what = exc.message if isinstance(exc, FirstmateError) else str(exc)
            self.log.append(f"relay: cannot queue the refusal's wake: {what}")


__all__ = ["BATCH_ENV", "DEFAULT_BATCH", "DEFAULT_WAIT", "WAIT_ENV", "Relay", "run"]
