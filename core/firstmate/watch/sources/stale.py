"""Stale panes: a crew whose pane stopped changing while its agent is not working.

Each poll looks at every registered crew's pane through the crew backend. A backend that can
list every pane's change signature in one call (tmux: ``list-panes -a``) is asked once per poll:
a pane whose signature changed is not stale (its quiet clock restarts) and is not read; one
whose signature held for ``FM_POLL`` is captured once, to confirm, before it is called stale —
a signature saves work but never raises a wake. The listing runs while the doorbell is
watched: when it rings first, the poll ends at once (due again at once) and the next one takes
the call up where it is. Other panes (a backend without signatures, a
target the listing does not name) are captured and hashed (trailing blanks ignored) at every
poll. A pane is **stale** when the same text (hash, or signature) was seen by at least two polls
spanning at least ``FM_POLL`` seconds (default 15: event-driven polls can come milliseconds
apart, and two of those prove nothing) and the backend does not report it busy — but a blank
pane is not stale within ``FM_STALE_START_GRACE`` seconds (default 120) of its crew's
registration (``fm crew spawn`` or ``add``): a harness that has drawn nothing yet may still be
starting, and one still blank after that is stale as any other. Reason line
``stale: <crew>`` (key ``<crew>``). After the watcher made that row durable, :meth:`commit`
records the hash as surfaced, and the pane stays suppressed until its content changes.

A pane that cannot be captured is skipped with one triage line when it goes missing (the status
source already surfaces a silent crew through its turn-end marker).

**Bound panes and exits.** A crew is bound to its pane's stable id and program
(:mod:`firstmate.watch.backends.panes`). With tmux's listing, each poll holds every crew's pane
against it before anything is read: a crew registered by a position is bound to the pane the
position names (once), and a pane that is gone, has ended, or runs another program is never
captured. A crew whose pane was seen live (by this source, or when the crew was bound) and is
now gone or ended wakes the primary once, from the listing alone (no tmux call more): reason
line ``signal: <crew>.exited`` (key ``<crew>.exited``); crews whose panes closed in the same
poll share one wake, ``signal: <crew>.exited (with <crew>, …)``, the first by name. A tmux
server that stopped closed every pane. The exit is recorded (the pane's id) after the row is
durable, and not raised again for that pane.

Per-crew state lives in ``state/crew/NAME.pane-state``: ``<hash> <polls seen, max 2> <first seen
epoch> <surfaced hash|-> <signature at that hash|-> <signature it was read busy at|-> <pane id it
was seen live at|-> <pane id whose exit was surfaced|->`` (``-`` for a hash not read yet; the last
two may be absent). It is kept across watchers: a re-armed watcher's first poll reads no pane
whose signature held. An entry that does not parse is dropped and rebuilt, for that crew alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import select
import time
from collections.abc import Callable
from typing import Any

import attrs

from firstmate.base import stopsignals
from firstmate.base.envnum import env_float, finite
from firstmate.base.errors import FirstmateError
from firstmate.store import crew as crewmod
from firstmate.store.crewscan import FleetScan
from firstmate.store.home import Home, atomic_write
from firstmate.watch.backends.base import CrewBackend
from firstmate.watch.backends.panes import bind_position, fact_of, judge, start_ticks
from firstmate.watch.backends.tmux import LIVE, PaneListing
from firstmate.watch.sources.base import PollContext, Wake

DEFAULT_QUIET = 15.0
START_GRACE_ENV = "FM_STALE_START_GRACE"
#: Seconds after a crew is registered during which its pane, while blank, is not stale.
DEFAULT_START_GRACE = 120.0
#: The key suffix and reason of a crew's pane exit: ``signal: <crew>.exited``.
EXITED = ".exited"
#: Other crews named in one exit reason line at most.
OTHERS_SHOWN = 8
SLICE_ENV = "FM_STALE_SLICE_MS"
DEFAULT_SLICE_MS = 20.0
#: The ``_due`` key that asks for the next poll at once: the fleet was not looked at in full.
_MORE = "\x00more"
#: How long a listing serves the polls that continue a look cut short (seconds from when it
#: was taken): a poll due at once need not list the panes again, and a fleet whose every poll is
#: cut short (a ring, a spent slice) still sees its panes' changes and exits within this.
_FRESH = 1.0
#: The digest of a pane whose text was not read yet (the backend's signature stands for it).
UNREAD = "-"
#: The digest of a blank pane (nothing drawn).
BLANK = hashlib.sha256(b"").hexdigest()
#: What :meth:`StaleSource._signatures` gives while the listing is still under way.
_PENDING = object()


@attrs.frozen
class PaneState:
    digest: str
    count: int
    since: float
    surfaced: str = "-"
    #: The backend's change signature when :attr:`digest` was captured ("-": none).
    signature: str = "-"
    #: The signature at which the pane was last read busy ("-": not busy): while it holds, the
    #: pane is not read again (a busy hint that goes away changes the pane, and the signature).
    busy_at: str = "-"
    #: The pane id this was last seen live at ("-": not known).
    pane: str = "-"
    #: The pane id whose exit was surfaced ("-": none).
    exited: str = "-"

    def encode(self) -> bytes:
        return (f"{self.digest} {self.count} {self.since:.3f} {self.surfaced} "
                f"{self.signature} {self.busy_at} {self.pane} {self.exited}\n").encode()

    @classmethod
    def decode(cls, text: str | None) -> PaneState | None:
        """A cache line as written by :meth:`encode`; None for anything else (then the entry
        is rebuilt, for that crew only): ``²`` passes ``isdigit`` but not ``int``, and a time
        must be a finite number."""
        parts = (text or "").split()
        if not 4 <= len(parts) <= 8 or not (parts[1].isascii() and parts[1].isdigit()):
            return None
        try:
            since = float(parts[2])
        except ValueError:
            return None
        if not finite(since):
            return None
        rest = [*parts[4:], "-", "-", "-", "-"]
        return cls(parts[0], int(parts[1]), since, parts[3], *rest[:4])


def grace_end(ctx: PollContext, member: crewmod.Crew) -> float | None:
    """When *member*'s start grace ends, while it lasts (None after it): a harness can take
    many seconds to draw its first screen on a loaded machine. A registration time ahead of the
    clock gets none."""
    grace = env_float(ctx.env, START_GRACE_ENV, DEFAULT_START_GRACE, allow_zero=True)
    return member.added_at + grace if 0 <= ctx.now - member.added_at < grace else None


def pane_digest(content: str) -> str:
    lines = [line.rstrip() for line in content.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return hashlib.sha256("\n".join(lines).encode("utf-8", "replace")).hexdigest()


@attrs.define(eq=False)
class StaleSource:
    home: Home
    backend: CrewBackend | None
    name: str = "stale"
    _pending: dict[str, PaneState] = attrs.field(factory=dict, init=False)
    _due: dict[str, float] = attrs.field(factory=dict, init=False)
    _missing: set[str] = attrs.field(factory=set, init=False)
    #: Where the next poll starts in the crew list (after a poll cut short by its slice).
    _resume: int = attrs.field(default=0, init=False)
    #: The signatures and crew list of a poll cut short, reused by its continuation.
    _listing: tuple[float, dict[str, str] | None, tuple[crewmod.Crew, ...]] | None = attrs.field(
        default=None, init=False)
    #: Each crew's pane state as last read or written by this process (the only writer while
    #: it holds the watcher singleton): a poll reads ``NAME.pane-state`` once per watcher.
    _states: dict[str, PaneState | None] = attrs.field(factory=dict, init=False)
    #: One listing of state/crew per full pass (registrations re-read only on change).
    #: (The sources of one watcher share one, so each registration is read once.)
    fleet: FleetScan = attrs.field(
        default=attrs.Factory(lambda self: FleetScan(self.home), takes_self=True), kw_only=True)
    #: A pane listing under way (a backend with ``start_signatures``), kept across polls.
    _call: Any = attrs.field(default=None, init=False)
    #: Crews whose pane exit the last wake reports: (crew, the pane id that exited).
    _exits: list[tuple[str, str]] = attrs.field(factory=list, init=False)
    #: The bound pane each crew was last verified live at, this poll (what its state records).
    _live: dict[str, str] = attrs.field(factory=dict, init=False)
    #: Why each other crew's pane is not read, this poll ("is gone", "has ended", ...).
    _down: dict[str, str] = attrs.field(factory=dict, init=False)
    #: Start times of pane programs, by pid, read once per watcher (``/proc``).
    _starts: dict[int, int | None] = attrs.field(factory=dict, init=False)
    #: A batch of pane reads under way (a backend with ``start_captures``), kept across polls.
    _batch: Any = attrs.field(default=None, init=False)
    #: Pane texts a batch read ahead for this pass, by pane id (``(None, why)``: not read).
    _read: dict[str, Any] = attrs.field(factory=dict, init=False)
    #: The fleet host whose crews this source looks at (None: this machine's crews). A host's
    #: panes are listed by :class:`~firstmate.watch.sources.hosts.HostsSource`, which hands the
    #: listing over in :attr:`given` before each poll; without one, nothing is read.
    host: str | None = attrs.field(default=None, kw_only=True)
    given: PaneListing | None = attrs.field(default=None, kw_only=True)
    #: How much of a poll goes to reading panes (milliseconds), and the knob that changes it.
    slice_ms: float = attrs.field(default=DEFAULT_SLICE_MS, kw_only=True)
    slice_env: str = attrs.field(default=SLICE_ENV, kw_only=True)

    def poll(self, ctx: PollContext) -> Wake | None:
        self._pending.clear()
        self._due.clear()
        self._exits = []
        if self.backend is None:
            return None
        quiet = env_float(ctx.env, "FM_POLL", DEFAULT_QUIET)
        budget = env_float(ctx.env, self.slice_env, self.slice_ms, allow_zero=True) / 1000
        listing, self._listing = self._listing, None
        if self._resume and listing is not None and time.monotonic() - listing[0] < _FRESH:
            listed, signatures, members = listing
        else:
            # (A look cut short goes on where it stopped, over the fresh listing: every crew
            # gets its turn, and no listing outlives _FRESH however many polls are cut short.)
            self._read.clear()  # (read for a listing this pass no longer goes by)
            found = self._signatures(ctx) if self.host is None else self.given
            if found is None and self.host is not None:
                return None  # (the host could not be listed: its crews are not read)
            listed = time.monotonic()
            if found is _PENDING:
                # The doorbell rang while tmux lists the panes: it is answered first, and the
                # next poll, due at once, takes the listing up where it is.
                self._due[_MORE] = ctx.now
                return None
            signatures = found if isinstance(found, dict) else None
            # A crew of another host has its pane there, never in this one's tmux.
            scanned = self.fleet.scan_until(ctx.rung if self.host is None else None)
            if scanned is None:
                # The doorbell rang while registrations were read: it is answered first, and
                # the next poll, due at once, scans again from what was read.
                self._due[_MORE] = ctx.now
                return None
            members = tuple(m for m in scanned if m.host == self.host)
            if isinstance(signatures, PaneListing):
                members = self._bind(members, signatures)
                exited = self._exited(ctx, members, signatures)
                if exited is not None:
                    return exited
        first = self._resume % len(members) if members else 0
        self._resume = 0
        order = members[first:] + members[:first]
        if budget > 0 and isinstance(signatures, PaneListing) and not self._read_ahead(
                ctx, order, signatures, quiet, budget):
            # The doorbell rang while tmux reads the batch: it is answered first, and the next
            # poll, due at once, takes the batch up where it is.
            self._resume = first or len(members)
            self._listing = (listed, signatures, members)
            self._due[_MORE] = ctx.now
            return None
        started = time.monotonic()
        for step, member in enumerate(order):
            if step and (time.monotonic() - started > budget or ctx.rung()):
                # The rest waits for the next poll, due now: the doorbell is answered first
                # (at once when it rang during this slice).
                self._resume = first + step
                self._listing = (listed, signatures, members)
                self._due[_MORE] = ctx.now
                return None
            try:
                wake = self._look(ctx, member, quiet, signatures)
            except FirstmateError as exc:
                self._note_missing(ctx, member.name, f"stale: {member.name}: skipped: {exc.message}")
                continue
            if wake is not None:
                return wake
        return None

    def commit(self, wake: Wake, ctx: PollContext) -> None:
        if wake.kind == "signal":  # (an exit: every stale wake is kind "stale")
            for name, pane in self._exits:
                seen = self._state(name) or PaneState(UNREAD, 1, ctx.now)
                self._write(name, attrs.evolve(seen, exited=pane))
            self._exits = []
            return
        state = self._pending.pop(wake.key, None)
        if state is not None:
            self._write(wake.key, attrs.evolve(state, surfaced=state.digest))

    def next_due(self, ctx: PollContext) -> float | None:
        return min(self._due.values()) if self._due else None

    @property
    def continuing(self) -> bool:
        """The last pass was cut short: the next poll goes on with the listing it had."""
        return bool(self._resume) and self._listing is not None

    # --- bound panes and exits -----------------------------------------------------------------

    def _start_of(self, pid: int) -> int | None:
        starts = getattr(self.given, "starts", None)
        if self.host is not None:  # (read on the host, with its listing)
            return starts.get(pid) if isinstance(starts, dict) else None
        if pid not in self._starts:
            self._starts[pid] = start_ticks(pid)
        return self._starts[pid]

    def _bind(self, members: tuple[crewmod.Crew, ...],
              listing: PaneListing) -> tuple[crewmod.Crew, ...]:
        """*members*, each registered by a position now bound to the pane it names (once); a
        host's crews are bound on their host."""
        if self.host is not None or all(member.bound for member in members):
            return members
        found = []
        for member in members:
            if not member.bound:
                with contextlib.suppress(FirstmateError):  # (unsafe to rewrite: read as it is)
                    member = bind_position(self.home, member, fact_of(listing, member), members,
                                           self._start_of)
                if member.bound:
                    self.fleet.forget(member.name, crewmod.PANE)
            found.append(member)
        return tuple(found)

    def _exited(self, ctx: PollContext, members: tuple[crewmod.Crew, ...],
                listing: PaneListing) -> Wake | None:
        """One wake for every crew whose pane was seen live and is now gone or ended (not
        surfaced before); None when there is none."""
        self._live.clear()
        self._down.clear()
        exits: list[tuple[str, str]] = []
        for member in members:
            verdict = judge(member, fact_of(listing, member), self._start_of)
            if verdict.state == LIVE and member.bound:
                self._live[member.name] = member.pane
                continue
            self._down[member.name] = verdict.why or "names a pane another crew is bound to"
            if not member.bound:
                continue  # (a position that names no pane: there is nothing it was)
            try:
                state = self._state(member.name)
            except FirstmateError:
                continue  # (skipped with its triage line by the pass over the fleet)
            seen = member.pid is not None or (state is not None and state.pane == member.pane)
            if seen and (state is None or state.exited != member.pane):
                exits.append((member.name, member.pane))
        if not exits:
            return None
        self._exits = exits
        first = exits[0][0]
        names = [name for name, _ in exits[1:]]
        more = ""
        if names:
            shown = ", ".join(names[:OTHERS_SHOWN])
            extra = f" and {len(names) - OTHERS_SHOWN} more" if len(names) > OTHERS_SHOWN else ""
            more = f" (with {shown}{extra})"
        return Wake("signal", f"{first}{EXITED}", f"signal: {first}{EXITED}{more}")

    def _state(self, name: str) -> PaneState | None:
        if name not in self._states:
            self._states[name] = PaneState.decode(
                crewmod.read_text(self.fleet.path(name, crewmod.PANE_STATE)))
        return self._states[name]

    # --- internals -----------------------------------------------------------------------------

    def close(self) -> None:
        """End a pane listing or batch of reads still under way (the watcher is closing)."""
        for call in (self._call, self._batch):
            if call is not None:
                call.kill()
        self._call = self._batch = None

    def _read_ahead(self, ctx: PollContext, order: tuple[crewmod.Crew, ...],
                    listing: PaneListing, quiet: float, budget: float) -> bool:
        """Read in one tmux call (:mod:`firstmate.watch.backends.panebatch`) the panes that this
        pass, in *order*, is about to read to confirm (up to a batch; a lone one is read as
        before, and so is every pane with a slice of 0: one read per poll); False when the
        doorbell rang while tmux works (the call stays under way)."""
        start = getattr(self.backend, "start_captures", None)
        if not callable(start):
            return True
        call = self._batch
        if call is None:
            if self._read:
                return True  # what the last batch read is used first
            wanted = self._wanted(ctx, order, listing, quiet, budget)
            if len(wanted) < 2:
                return True
            with stopsignals.held():  # recorded before a stop can land: close() kills it
                try:
                    call = start(wanted)
                except Exception:  # a broken backend reads each pane on its own
                    return True
                if call is None:
                    return True
                self._batch = call
        if not self._finish(ctx, call):
            return False
        self._batch = None
        try:
            found = call.result()
        except Exception:
            found = None
        if isinstance(found, dict):
            self._read.update(found)
        return True

    def _wanted(self, ctx: PollContext, order: tuple[crewmod.Crew, ...], listing: PaneListing,
                quiet: float, budget: float) -> list[str]:
        """The panes of the first crews in *order* that are about to be read, up to a batch,
        looked for within the slice's *budget* and only until the doorbell rings (a watcher's
        first poll reads each crew's pane state here)."""
        from firstmate.watch.backends.panebatch import BATCH

        began = time.monotonic()
        wanted: list[str] = []
        for step, member in enumerate(order):
            if len(wanted) >= BATCH or (step % 16 == 15 and (
                    time.monotonic() - began > budget or ctx.rung())):
                break
            if self._confirms(ctx, member, listing, quiet):
                wanted.append(member.pane)
        return wanted

    def _confirms(self, ctx: PollContext, member: crewmod.Crew, listing: PaneListing,
                  quiet: float) -> bool:
        """Whether :meth:`_look` is about to read *member*'s pane to confirm it quiet: its
        live pane's signature held for *quiet* since it was first seen, not yet read busy (or
        blank in its crew's start grace) at it, not surfaced. (A wrong guess only costs a read,
        or a pane read on its own.)"""
        if member.name not in self._live or member.pane in self._read:
            return False
        try:
            state = self._state(member.name)
        except FirstmateError:
            return False
        signature = listing.get(member.pane, "-")
        return (signature != "-" and state is not None and state.signature == signature
                and not (state.digest != UNREAD and state.surfaced == state.digest)
                and ctx.now - state.since >= quiet and state.busy_at != signature
                and not (state.digest == BLANK and grace_end(ctx, member) is not None))

    def _signatures(self, ctx: PollContext) -> object:
        """Every pane's change signature from one backend call, when the backend has one;
        :data:`_PENDING` when the doorbell rang before a listing under way finished."""
        start = getattr(self.backend, "start_signatures", None)
        if callable(start):
            return self._listing_of(ctx, start)
        ask = getattr(self.backend, "signatures", None)
        if not callable(ask):
            return None
        try:
            found = ask()
        except Exception:  # a broken backend is "no signatures": every pane is captured
            return None
        return found if isinstance(found, dict) else None

    def _finish(self, ctx: PollContext, call: Any) -> bool:
        """Step the tmux call under way until it is over, listening to the doorbell; False when
        it rang first (the call stays under way for the next poll)."""
        try:
            while not call.step():
                if ctx.rung():
                    return False
                watch = [call.fileno()] + ([ctx.bell_fd] if ctx.bell_fd is not None else [])
                # (without a doorbell to wait on, the ring is looked for every 10 ms)
                select.select(watch, [], [], 0.25 if ctx.bell_fd is not None else 0.01)
        except BaseException:
            self.close()  # a stop signal while waiting: no tmux call outlives the watcher
            raise
        return True

    def _listing_of(self, ctx: PollContext, start: Callable[[], Any]) -> object:
        call = self._call
        if call is None:
            with stopsignals.held():  # recorded before a stop can land: close() kills it
                try:
                    call = start()
                except Exception:  # a broken backend is "no signatures": every pane is captured
                    return None
                if call is None:
                    return None
                self._call = call
        if not self._finish(ctx, call):
            return _PENDING
        self._call = None
        try:
            found = call.result()
        except Exception:
            return None
        return found if isinstance(found, dict) else None

    def _capture(self, ctx: PollContext, member: crewmod.Crew) -> str | None:
        assert self.backend is not None
        ahead = self._read.pop(member.pane, None)
        if isinstance(ahead, str):
            content: str | None = ahead
        elif ahead is not None:  # (None, why): its read in the batch failed
            content, self.backend.last_error = None, ahead[1]
        else:
            content = self.backend.capture(member.pane)
        if content is None:
            why = self.backend.last_error or "no such pane"
            self._note_missing(ctx, member.name,
                               f"stale: {member.name}: pane {member.pane} not captured: {why}")
            return None
        self._missing.discard(member.name)
        return content

    def _look(self, ctx: PollContext, member: crewmod.Crew, quiet: float,
              signatures: dict[str, str] | None) -> Wake | None:
        name = member.name
        if isinstance(signatures, PaneListing) and name not in self._live:
            # Not the crew's live pane (gone, ended, another program): nothing of it is read.
            why = self._down.get(name, "is not known")
            self._note_missing(ctx, name, f"stale: {name}: pane {member.shown} {why}; not read")
            return None
        state = self._state(name)
        if state is not None and name in self._live and state.pane != member.pane:
            self._write(name, state)  # (records the pane it is live at: its exit will wake)
        signature = (signatures or {}).get(member.pane, "-")
        content: str | None = None
        if signature != "-":
            # The backend vouches for change: a changed (or first seen) pane is not stale and
            # its quiet clock restarts, with no capture; its text is read only to confirm.
            self._missing.discard(name)
            if state is None or state.signature != signature:
                surfaced = state.surfaced if state is not None else "-"
                self._write(name, PaneState(UNREAD, 1, ctx.now, surfaced, signature))
                self._due[name] = ctx.now + quiet
                return None
        else:
            content = self._capture(ctx, member)
            if content is None:
                return None
            digest = pane_digest(content)
            if state is None or state.digest != digest:
                surfaced = state.surfaced if state is not None else "-"
                self._write(name, PaneState(digest, 1, ctx.now, surfaced))
                self._due[name] = ctx.now + quiet
                return None
        if state.count < 2 and signature == "-":
            # (With a signature the quiet clock only restarts on a change: nothing to count.)
            state = attrs.evolve(state, count=2)
            self._write(name, state)
        if state.digest != UNREAD and state.surfaced == state.digest:
            return None  # already surfaced; suppressed until the content changes
        if ctx.now - state.since < quiet:
            self._due[name] = state.since + quiet
            return None
        if signature != "-" and state.busy_at == signature:
            return None  # read busy at this very signature: nothing changed since
        if state.digest == BLANK and self._starting(ctx, member):
            return None  # read blank at this signature (or this poll), its crew just registered
        if content is None:  # about to call it stale: read it for real first
            content = self._capture(ctx, member)
            if content is None:
                return None
            digest = pane_digest(content)
            if state.digest == UNREAD:  # unchanged since `since`: this is its text since then
                state = attrs.evolve(state, digest=digest)
                self._write(name, state)
            elif digest != state.digest:
                self._write(name, PaneState(digest, 1, ctx.now, state.surfaced, signature))
                self._due[name] = ctx.now + quiet
                return None
            if state.surfaced == state.digest:
                return None
        if state.digest == BLANK and self._starting(ctx, member):
            return None
        if self._busy(member.pane, content):
            if signature != "-":
                self._write(name, attrs.evolve(state, busy_at=signature))
            return None
        self._pending[name] = state
        return Wake("stale", name, f"stale: {name}")

    def _starting(self, ctx: PollContext, member: crewmod.Crew) -> bool:
        """Whether *member* was registered less than the start grace ago (its blank pane is
        then looked at again when the grace ends)."""
        ends = grace_end(ctx, member)
        if ends is not None:
            self._due[member.name] = ends
        return ends is not None

    def _busy(self, pane: str, content: str) -> bool:
        assert self.backend is not None
        try:
            busy_in = getattr(self.backend, "busy_in", None)
            if callable(busy_in):
                return bool(busy_in(content))  # no second capture when the backend can judge text
            return bool(self.backend.busy(pane))
        except Exception:  # a broken backend is "no evidence", never a crash
            return False

    def _write(self, name: str, state: PaneState) -> None:
        # A cache of what was seen: a crash that loses it costs one re-read, so no fsync (at
        # 500 crews the first poll writes 500 of these).
        state = attrs.evolve(state, pane=self._live.get(name, state.pane))
        self._states[name] = state
        atomic_write(crewmod.path(self.home, name, crewmod.PANE_STATE), state.encode(),
                     durable=False)

    def _note_missing(self, ctx: PollContext, name: str, message: str) -> None:
        if name not in self._missing:
            self._missing.add(name)
            ctx.triage(message)
