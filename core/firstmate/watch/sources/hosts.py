"""Crews on other hosts of the home's fleet: their panes, read over SSH, and hosts that cannot be
reached.

For every fleet host with registered crews and SSH settings (:mod:`firstmate.fleet.sshhosts`),
each look lists the host's panes with **one** ``list-panes`` through its persistent connection
(:class:`~firstmate.watch.backends.sshtmux.SshTmuxBackend`), every host's call started before
any is waited for, and the doorbell answered first when it rings meanwhile (the calls go on, and
the next poll, due at once, takes them up). A host is looked at when its crews are due (their
quiet clocks, a retry) and at every full poll of the watcher (``FM_POLL``, at most a third of
the health grace). Its listing is handed to a
:class:`~firstmate.watch.sources.stale.StaleSource` of that host's crews alone, which does for
them what it does for this machine's: binds nothing (a host's crews are bound there), holds each
crew's pane to its id, pid and start time (read on the host), wakes once for panes that closed
(``signal: <host>.<crew>.exited``) and for panes gone quiet (``stale: <host>.<crew>``), its
reads bounded per poll by ``FM_SSH_SLICE_MS`` (250; a read over SSH costs a round trip), the
panes it is about to confirm read in batches through one ssh call each
(:meth:`~firstmate.watch.backends.sshtmux.SshTmuxBackend.start_captures`).

**Unreachable.** A host whose listing fails (no connection, authentication or the host's key
refused, no tmux there, no answer within ``FM_SSH_TIMEOUT``) is tried again ``FM_SSH_RETRY``
seconds later (2); failing again, it is *unreachable*: one wake for the whole host, ``signal:
<host>.unreachable (crews: <host>.<crew>, …): <why>`` (key ``<host>.unreachable``), and none of
its crews is judged meanwhile (no stale or exit wake). The mark (``state/fleet/<host>.unreachable``)
is kept across watchers, so the host wakes nobody again until a listing succeeds, which clears
it (one triage line) and looks at its crews again: a pane that closed meanwhile then wakes once.

A host without SSH settings has its crews' reports only (docs/fleet-remote.md): nothing is read
from it. Settings that do not verify are never used; each is noted once in the triage log.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import time
from typing import Any

import attrs

from firstmate.base import stopsignals
from firstmate.base.envnum import env_float
from firstmate.base.errors import FirstmateError
from firstmate.base.safepaths import atomic_write, make_private_dir
from firstmate.fleet import config
from firstmate.store import crew as crewmod
from firstmate.store.crewscan import FleetScan
from firstmate.store.health import grace
from firstmate.store.home import Home
from firstmate.watch.backends.hosts import CrewPanes
from firstmate.watch.backends.sshtmux import SshListing
from firstmate.watch.backends.tmux import PaneListing
from firstmate.watch.sources.base import PollContext, Wake
from firstmate.watch.sources.stale import DEFAULT_QUIET, StaleSource

__all__ = ["DEFAULT_RETRY", "DEFAULT_SLICE_MS", "SLICE_ENV", "UNREACHABLE", "HostsSource",
           "mark_path"]

DEFAULT_RETRY = 2.0
#: How much of a poll a host's stale source spends reading its panes (``FM_SSH_SLICE_MS``): a
#: read over SSH takes a round trip, so the local 20 ms would allow one; a ring is still
#: answered after the read under way.
SLICE_ENV = "FM_SSH_SLICE_MS"
DEFAULT_SLICE_MS = 250.0
#: The key suffix of a host's wake: ``<host>.unreachable``.
UNREACHABLE = ".unreachable"
#: Crews named in the reason line at most.
CREWS_SHOWN = 8
_MORE = "\x00more"


def mark_path(home: Home, host: str) -> str:
    return os.path.join(os.fspath(home.state), "fleet", f"{host}{UNREACHABLE}")


def read_mark(home: Home, host: str) -> dict[str, Any] | None:
    """The host's unreachable mark (when it was surfaced, and why), None when it has none."""
    try:
        with open(mark_path(home, host), "rb") as fh:
            data = json.loads(fh.read(4096) or b"{}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@attrs.define(eq=False)
class HostsSource:
    home: Home
    panes: CrewPanes
    fleet: FleetScan = attrs.field(
        default=attrs.Factory(lambda self: FleetScan(self.home), takes_self=True), kw_only=True)
    name: str = "hosts"
    #: Each host's stale source (its crews alone).
    _subs: dict[str, StaleSource] = attrs.field(factory=dict, init=False)
    #: Listings under way, kept across polls (a ring cut the wait short).
    _calls: dict[str, SshListing] = attrs.field(factory=dict, init=False)
    #: When each host was last listed (monotonic).
    _listed: dict[str, float] = attrs.field(factory=dict, init=False)
    #: Hosts whose last listing failed: (failures in a row, why).
    _failed: dict[str, tuple[int, str]] = attrs.field(factory=dict, init=False)
    _due: dict[str, float] = attrs.field(factory=dict, init=False)
    _noted: set[str] = attrs.field(factory=set, init=False)
    #: What the last wake was: a host's unreachable (host, why), or a host's stale source's.
    _raised: tuple[str, str] | None = attrs.field(default=None, init=False)
    _raised_by: StaleSource | None = attrs.field(default=None, init=False)

    def poll(self, ctx: PollContext) -> Wake | None:
        self._raised, self._raised_by = None, None
        self._due.pop(_MORE, None)
        if not self._primary(ctx):
            return None  # (a home that is no fleet's primary has no crew on another host)
        members = self.fleet.scan()
        crews: dict[str, list[str]] = {}
        for member in members:
            if member.host is not None:
                crews.setdefault(member.host, []).append(member.name)
        if not crews:
            self.close()
            return None
        # (as often as the watcher's full poll, which stale's listing of this machine follows)
        every = min(env_float(ctx.env, "FM_POLL", DEFAULT_QUIET), max(grace(ctx.env) / 3, 0.05))
        now = time.monotonic()
        failed: dict[str, str] = {}
        resumed: list[str] = []
        for host in sorted(crews):
            if host in self._calls:
                continue
            sub = self._subs.get(host)
            if sub is not None and sub.continuing and now - self._listed.get(host, 0) < 1.0:
                resumed.append(host)  # (a pass cut short: its fresh listing serves it)
            elif self._wanted(ctx, host, now, every):
                why = self._start(ctx, host)
                if why:
                    failed[host] = why
        if not self._wait(ctx):
            self._due[_MORE] = ctx.now  # (the doorbell first; the calls go on)
            return None
        for host in sorted({*self._calls, *failed, *resumed}):
            call = self._calls.pop(host, None)
            if host in resumed:
                wake = self._pass(ctx, host, None)
            elif call is None:
                wake = self._failure(ctx, host, failed[host], crews.get(host, []))
            else:
                self._listed[host] = now
                listing = call.result()
                wake = self._failure(ctx, host, call.unreachable, crews.get(host, [])) \
                    if listing is None else self._pass(ctx, host, listing)
            if wake is not None:
                return wake
        return None

    def _primary(self, ctx: PollContext) -> bool:
        """Whether this home is a fleet's primary (one ``stat``: its fleet configuration)."""
        try:
            path = os.path.join(config.fleet_dir(os.fspath(self.home.root), ctx.env),
                                config.PRIMARY)
            return os.path.exists(path)
        except (OSError, ValueError):
            return False

    def _wanted(self, ctx: PollContext, host: str, now: float, every: float) -> bool:
        """Whether *host* is to be listed now: due, or not listed since the watcher's last full
        poll (*every* seconds apart, counted from when it began: a little is allowed for)."""
        if now - self._listed.get(host, -1e18) >= every * 0.9:
            return True
        due = [self._due.get(host)]
        sub = self._subs.get(host)
        if sub is not None:
            with contextlib.suppress(Exception):
                due.append(sub.next_due(ctx))
        return any(when is not None and when <= ctx.now for when in due)

    def _start(self, ctx: PollContext, host: str) -> str:
        """Start listing *host*'s panes; why it could not start ("" when it did, or when the
        host's panes are not to be read at all)."""
        self._listed[host] = time.monotonic()
        try:
            backend = self.panes.host(host)
        except FirstmateError as exc:
            self._note(ctx, f"{host}:settings", f"hosts: {host}: its panes are not read: "
                                                f"{exc.message}")
            return ""
        with stopsignals.held():  # recorded before a stop can land: close() kills it
            call = backend.start_signatures()
            if isinstance(call, SshListing):
                self._calls[host] = call
                return ""
        return backend.unreachable or backend.last_error or "ssh could not run"

    def _wait(self, ctx: PollContext) -> bool:
        """Wait for every listing under way; False when the doorbell rang first."""
        try:
            while True:
                left = [call for call in self._calls.values() if not call.step()]
                if not left:
                    return True
                if ctx.rung():
                    return False
                fds = [fd for fd in (call.fileno() for call in left) if fd >= 0]
                if ctx.bell_fd is not None:
                    fds.append(ctx.bell_fd)
                select.select(fds, [], [], 0.25 if ctx.bell_fd is not None else 0.01)
        except BaseException:
            self.close()  # a stop signal while waiting: no ssh call outlives the watcher
            raise

    def _failure(self, ctx: PollContext, host: str, why: str,
                 names: list[str]) -> Wake | None:
        count = self._failed.get(host, (0, ""))[0] + 1
        why = crewmod.clean_text(why or "its panes could not be listed", 300)
        self._failed[host] = (count, why)
        if read_mark(self.home, host) is not None:
            return None  # (surfaced already: nobody is woken again until it is back)
        if count < 2:
            self._due[host] = ctx.now + env_float(ctx.env, "FM_SSH_RETRY", DEFAULT_RETRY,
                                                  allow_zero=True)
            self._note(ctx, f"{host}:try", f"hosts: {host}: its panes could not be listed "
                                           f"({why}); trying again")
            return None
        self._due.pop(host, None)
        shown = ", ".join(sorted(names)[:CREWS_SHOWN])
        more = f" and {len(names) - CREWS_SHOWN} more" if len(names) > CREWS_SHOWN else ""
        self._raised = (host, why)
        return Wake("signal", f"{host}{UNREACHABLE}",
                    f"signal: {host}{UNREACHABLE} (crews: {shown}{more}): {why}")

    def _pass(self, ctx: PollContext, host: str, listing: PaneListing | None) -> Wake | None:
        """Host *host*'s crews looked at by its stale source, with its new *listing* (None: a
        pass cut short goes on with the listing it had)."""
        sub = self._subs.get(host)
        if listing is None:
            return None if sub is None else self._polled(ctx, sub)
        self._failed.pop(host, None)
        self._due.pop(host, None)
        self._noted.discard(f"{host}:try")
        if read_mark(self.home, host) is not None:
            with contextlib.suppress(OSError):
                os.unlink(mark_path(self.home, host))
            ctx.triage(f"hosts: {host} is reachable again; its crews' panes are read")
        if sub is None:
            sub = StaleSource(self.home, self.panes.host(host), fleet=self.fleet, host=host,
                              slice_ms=DEFAULT_SLICE_MS, slice_env=SLICE_ENV)
            self._subs[host] = sub
        sub.given = listing
        return self._polled(ctx, sub)

    def _polled(self, ctx: PollContext, sub: StaleSource) -> Wake | None:
        wake = sub.poll(ctx)
        if wake is not None:
            self._raised_by = sub
        return wake

    def commit(self, wake: Wake, ctx: PollContext) -> None:
        if self._raised is not None:
            host, why = self._raised
            make_private_dir(os.path.dirname(mark_path(self.home, host)))
            atomic_write(mark_path(self.home, host),
                         json.dumps({"at": round(ctx.now, 3), "why": why}).encode() + b"\n")
            self._raised = None
        elif self._raised_by is not None:
            self._raised_by.commit(wake, ctx)
            self._raised_by = None

    def next_due(self, ctx: PollContext) -> float | None:
        due = list(self._due.values())
        for sub in self._subs.values():
            with contextlib.suppress(Exception):
                when = sub.next_due(ctx)
                if when is not None:
                    due.append(when)
        return min(due) if due else None

    def close(self) -> None:
        """End the listings under way (the watcher is closing)."""
        calls, self._calls = self._calls, {}
        for call in calls.values():
            call.kill()

    def _note(self, ctx: PollContext, key: str, line: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            ctx.triage(line)
