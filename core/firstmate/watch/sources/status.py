"""Status signals and turn-end markers: the crews' own reports.

Each poll reads, per registered crew, the status lines appended since the source's cursor
(``NAME.signal-cursor``) and whether the turn-end marker changed since ``NAME.turn-seen`` — every
crew on the watcher's full poll, and between full polls only the crews the change journal names
and the ones left pending (:mod:`firstmate.store.crewchanges`,
:mod:`firstmate.watch.sources.changes`), which is what looking at every crew would find.

Actionable, when the new lines hold a captain-relevant event (``FM_CAPTAIN_RE``, searched
case-insensitively in each line; default ``done:|needs-decision:|blocked:|failed:|PR ready|
checks green|ready in branch|merged``) or when the crew shows **no evidence of working**: its
backend does not report its pane busy (see :mod:`firstmate.watch.backends.tmux`; a pane that cannot be
read is not busy). Otherwise the event is absorbed: the cursor advances at once and the triage
log gets ``absorbed signal: …`` — except that a turn end recorded while the pane still looks
busy is looked at again ``FM_TURN_SETTLE`` seconds (3) after the marker changed, since a harness
runs its turn-end hook before it redraws its idle screen; still busy then, it is absorbed. The
captain's own ``answered:`` lines are never events.

Reason lines (one per wake; the newest captain-relevant line wins, else the newest line)::

    signal: <crew>.status: <status line>     key <crew>.status
    signal: <crew>.turn-ended                key <crew>.turn-ended  (a turn end with no new line)

A status wake also covers a turn end seen with it.

Coalescing is a quiet-window debounce over the whole fleet (docs/watcher.md, "Coalescing"):
pending crew events wake once no new line or turn end arrived for the quiet window
(``FM_SIGNAL_QUIET``, 2 s; ``FM_SIGNAL_URGENT_QUIET``, 0.25 s, when any pending line is
``needs-decision:``, ``blocked:`` or ``failed:``), and never later than ``FM_SIGNAL_GRACE``
(30 s; 0 = no coalescing) after the oldest pending line. One wake then covers every crew pending
at that moment: its reason line is the most urgent crew's (urgent, then captain-relevant, then
the oldest), naming the others, and its commit advances every one of their cursors, so a burst
of reports from several crews closes one cycle whose drain shows them all.
:meth:`StatusSource.next_due` names the release time so the watcher polls exactly then. Cursors
advance only in :meth:`StatusSource.commit`, after the watcher made the row durable.
"""

from __future__ import annotations

import os
import re
import stat
from typing import ClassVar

import attrs

from firstmate.base.envnum import env_float
from firstmate.base.errors import FirstmateError
from firstmate.fast import crewlog
from firstmate.fast.captain import captain_pattern
from firstmate.fast.crewlog import LINE_MAX
from firstmate.store import crew as crewmod
from firstmate.store.crewchanges import Changes, Seen
from firstmate.store.crewscan import FleetScan
from firstmate.store.home import Home, atomic_write
from firstmate.watch.backends.base import CrewBackend
from firstmate.watch.backends.panes import busy as pane_busy
from firstmate.watch.sources.base import PollContext, Wake
from firstmate.watch.sources.changes import due_full

DEFAULT_SIGNAL_GRACE = 30.0
DEFAULT_SIGNAL_QUIET = 2.0
DEFAULT_URGENT_QUIET = 0.25
#: Seconds a turn end recorded while its crew's pane still looks busy is looked at again before
#: it is absorbed (``FM_TURN_SETTLE``): a harness runs its turn-end hook before it redraws the
#: idle screen, so the busy hint of the turn that just ended can still be on show.
DEFAULT_TURN_SETTLE = 3.0
#: Verbs that wake after the short quiet window: someone is waiting on the captain.
URGENT_VERBS = frozenset({"needs-decision", "blocked", "failed"})
#: Other crews named in one reason line at most.
OTHERS_SHOWN = 8
#: Longest status text carried into a reason line.
REASON_TEXT_BYTES = 2000
#: Most bytes of new status read per crew per poll (the rest is read on the next poll).
READ_LIMIT = 1 << 20
#: The files of a crew this source reads (what a poll that is not a full pass ``lstat``\ s).
_LOOKED_AT = (crewmod.STATUS, crewmod.TURN_ENDED, crewmod.SIGNAL_CURSOR, crewmod.TURN_SEEN,
              crewmod.DRAIN_CURSOR)


@attrs.frozen
class _Pending:
    crew: str
    cursor: crewmod.Cursor | None
    turn_seen: str | None


@attrs.frozen
class _Candidate:
    """One crew's pending event, as the fleet-wide debounce weighs it."""

    wake: Wake
    pending: _Pending
    #: 2 urgent, 1 captain-relevant, 0 anything else (an idle crew's chatter, a turn end).
    rank: int
    #: When its newest line arrived (the quiet window runs from the newest of all crews).
    latest: float
    #: When its oldest pending line arrived (the grace runs from the oldest of all crews).
    earliest: float


def _later(stored: crewmod.Cursor | None, mark: crewlog.Mark | None,
           log: os.stat_result | None) -> crewmod.Cursor | None:
    """Where the status log is read from: the source's own cursor, or a drain's presentation
    mark when that is further on in the same log (and within it: a mark past the end was not
    written for this log's lines)."""
    if mark is None or log is None or mark[0][0] != log.st_ino or mark[0][1] > log.st_size:
        return stored
    if stored is None or stored.inode != log.st_ino or stored.offset < mark[0][1]:
        return crewmod.Cursor(*mark[0])
    return stored


@attrs.define(eq=False)
class StatusSource:
    home: Home
    backend: CrewBackend | None = None
    name: str = "status"
    #: Polled when the doorbell rings: a crew's status line or turn end rings it.
    doorbell: ClassVar[bool] = True
    _held: dict[str, float] = attrs.field(factory=dict, init=False)
    _pending: dict[str, _Pending] = attrs.field(factory=dict, init=False)
    #: crew → (what was pending, when this process first saw it): the grace's fallback clock.
    _first_seen: dict[str, tuple[tuple[int, int, str], float]] = attrs.field(factory=dict, init=False)
    #: crew → when this process first saw it pending at all (kept across its new lines).
    _since: dict[str, float] = attrs.field(factory=dict, init=False)
    #: The other crews the last wake covers: their cursors advance with its commit.
    _covered: list[_Pending] = attrs.field(factory=list, init=False)
    _noted: set[str] = attrs.field(factory=set, init=False)
    #: Whether this source polled before (a new watcher's first poll may start from the record).
    _looked: bool = attrs.field(default=False, init=False)
    #: One listing of state/crew per poll; cursors and turn-seen marks re-read only on change.
    #: (The sources of one watcher share one, so each registration is read once.)
    fleet: FleetScan = attrs.field(
        default=attrs.Factory(lambda self: FleetScan(self.home), takes_self=True), kw_only=True)
    #: The change journal: which crews a poll that is not a full pass looks at.
    changes: Changes = attrs.field(
        default=attrs.Factory(lambda self: Changes(self.home), takes_self=True), kw_only=True)

    def poll(self, ctx: PollContext) -> Wake | None:
        self._held.clear()
        self._pending.clear()
        captain, usable = captain_pattern(ctx.env.get("FM_CAPTAIN_RE"))
        if not usable:
            self._note_once(ctx, "FM_CAPTAIN_RE", "status: FM_CAPTAIN_RE is not a valid regex; using the default")
        found: list[_Candidate] = []
        members, position, full_at = self._members(ctx)
        left: set[str] = set()  # (the crews to look at again next time: changes.py)
        for member in members:
            try:
                if self._nothing_new(member.name):
                    self._first_seen.pop(member.name, None)
                    self._since.pop(member.name, None)
                    continue
                candidate = self._look(ctx, member, captain)
                # (held to settle, or read only up to READ_LIMIT: more to look at next time)
                if candidate is not None or f"settle:{member.name}" in self._held \
                        or not self._nothing_new(member.name):
                    left.add(member.name)
            except FirstmateError as exc:
                self._note_once(ctx, member.name, f"status: {member.name}: skipped: {exc.message}")
                left.add(member.name)
                continue
            if candidate is not None:
                found.append(candidate)
        self.changes.save(Seen(*position, frozenset(left), full_at))
        if not found:
            return None
        release = self._release(ctx, found)
        if ctx.now < release:
            self._held["fleet"] = release
            return None
        found.sort(key=lambda c: (-c.rank, c.earliest, c.pending.crew))
        first, others = found[0], found[1:]
        wake = first.wake
        if others:
            names = ", ".join(c.pending.crew for c in others[:OTHERS_SHOWN])
            more = f" and {len(others) - OTHERS_SHOWN} more" if len(others) > OTHERS_SHOWN else ""
            wake = attrs.evolve(wake, reason=f"{wake.reason} (with {names}{more})")
        self._pending[wake.key] = first.pending
        self._covered = [c.pending for c in others]
        return wake

    def commit(self, wake: Wake, ctx: PollContext) -> None:
        pending = self._pending.pop(wake.key, None)
        if pending is None:
            return
        for done in (pending, *self._covered):
            self._advance(done)
            self._first_seen.pop(done.crew, None)
            self._since.pop(done.crew, None)
        self._covered = []

    def next_due(self, ctx: PollContext) -> float | None:
        return min(self._held.values()) if self._held else None

    # --- internals -----------------------------------------------------------------------------

    def _members(self, ctx: PollContext) -> tuple[tuple[crewmod.Crew, ...], tuple[int, int], float]:
        """The crews this poll looks at (every one on a full pass, else those pending or named
        in the change journal since: changes.py), the journal position it read to, and when
        the last full pass was."""
        seen = self.changes.load()
        first, self._looked = not self._looked, True
        if seen is not None and not due_full(seen, ctx.full, first, ctx.now, ctx.env):
            named = self.changes.since(seen)
            if named is not None:
                names, position = named
                return (self.fleet.scan_only(names | seen.pending, _LOOKED_AT), position,
                        seen.full_at)
        self.changes.rotate()
        position = self.changes.position()  # (before the look: a name written during it is read)
        return self.fleet.scan(), position, ctx.now

    @staticmethod
    def _release(ctx: PollContext, found: list[_Candidate]) -> float:
        """When the pending events wake: the quiet window after the newest of them, bounded by
        the grace after the oldest; at once with the grace 0."""
        grace = env_float(ctx.env, "FM_SIGNAL_GRACE", DEFAULT_SIGNAL_GRACE, allow_zero=True)
        if grace <= 0:
            return ctx.now
        urgent = any(c.rank == 2 for c in found)
        quiet = (env_float(ctx.env, "FM_SIGNAL_URGENT_QUIET", DEFAULT_URGENT_QUIET, allow_zero=True)
                 if urgent else
                 env_float(ctx.env, "FM_SIGNAL_QUIET", DEFAULT_SIGNAL_QUIET, allow_zero=True))
        return min(max(c.latest for c in found) + min(quiet, grace),
                   min(c.earliest for c in found) + grace)

    def _nothing_new(self, name: str) -> bool:
        """True when the scan alone shows crew *name* has nothing past its marks: its status log
        ends at its cursor and its turn-end marker is the one seen (what :meth:`_look` would
        find, without opening a file that did not change). Anything else — a new byte, a file
        that is not a plain file — is left to :meth:`_look`."""
        scan = self.fleet
        turn = scan.stat(name, crewmod.TURN_ENDED)
        if turn is not None:
            if stat.S_ISLNK(turn.st_mode):
                return False
            signature = crewmod.marker_signature(turn)
            if (scan.text(name, crewmod.TURN_SEEN) or "").strip() != signature:
                return False
        log = scan.stat(name, crewmod.STATUS)
        if log is None:
            return True
        if not stat.S_ISREG(log.st_mode):
            return False
        cursor = crewmod.parse_cursor(scan.text(name, crewmod.SIGNAL_CURSOR, 256))
        return cursor is not None and cursor == crewmod.Cursor(log.st_ino, log.st_size)

    def _look(self, ctx: PollContext, member: crewmod.Crew,
              captain: re.Pattern[str]) -> _Candidate | None:
        name = member.name
        stored = crewmod.read_cursor(crewmod.path(self.home, name, crewmod.SIGNAL_CURSOR))
        # What a drain presented (its mark) was seen: read on from it when it is further on.
        mark = crewlog.parse_mark(self.fleet.text(name, crewmod.DRAIN_CURSOR, 256))
        start = _later(stored, mark, self.fleet.stat(name, crewmod.STATUS))
        span = crewmod.read_span(crewmod.path(self.home, name, crewmod.STATUS),
                                 0 if start is None else start.offset,
                                 inode=None if start is None else start.inode, limit=READ_LIMIT)
        cursor = crewmod.Cursor(span.inode, span.end) if span is not None else None
        turn = crewmod.turn_signature(self.home, name)
        seen = (crewmod.read_text(crewmod.path(self.home, name, crewmod.TURN_SEEN)) or "").strip()
        turn_new = turn is not None and turn[0] != seen
        # A turn end a drain showed with the crew's lines is seen too; a later one is new.
        turn_changed = turn_new and (mark is None or turn is None or mark[1] != turn[0])
        lines = span.lines if span is not None else ()
        events = [line for line in lines if not line.from_captain]
        if any(line.from_captain for line in lines) and any(
                crewlog.decision(line.text) is not None for line in events):
            # The captain answered a decision this source has not woken for: closed for it too.
            closed = self._closed_decisions(name)
            events = [line for line in events if line.start not in closed]
        for line in lines:
            if line.oversized:  # (a broken reporter, or cat of a binary): said once, read past
                where = cursor.inode if cursor is not None else 0
                self._note_once(ctx, f"oversized {name} {where} {line.start}",
                                f"status: {name}: a status line of {line.end - line.start} bytes "
                                f"at byte {line.start} of {name}.status was cut to its first "
                                f"{LINE_MAX} bytes; report with fm crew status NAME "
                                '"<verb>: note" (one short line)')
        pending = _Pending(name, cursor, turn[0] if turn_new and turn is not None else None)

        if not events and not turn_changed:
            self._first_seen.pop(name, None)
            self._since.pop(name, None)
            if (cursor is not None and cursor != stored) or pending.turn_seen is not None:
                # only the captain's own lines (or blanks), or what a drain already showed
                self._advance(pending)
            return None

        relevant = [line for line in events if captain.search(line.text)]
        if not relevant and self._working(member):
            settle = env_float(ctx.env, "FM_TURN_SETTLE", DEFAULT_TURN_SETTLE, allow_zero=True)
            if turn_changed and turn is not None and ctx.now < turn[1] + settle:
                self._held[f"settle:{name}"] = turn[1] + settle  # look again once redrawn
                return None
            self._advance(pending)
            self._first_seen.pop(name, None)
            self._since.pop(name, None)
            what = (f"{name}.status: {crewmod.clean_text(events[-1].text, REASON_TEXT_BYTES)}"
                    if events else f"{name}.turn-ended")
            ctx.triage(f"absorbed signal: {what} (crew busy)")
            return None

        marker = (cursor.inode if cursor else 0, cursor.offset if cursor else 0, turn[0] if turn else "")
        first = self._first_seen.get(name)
        if first is None or first[0] != marker:
            first = (marker, ctx.now)
            self._first_seen[name] = first
        since = self._since.setdefault(name, ctx.now)
        stamps = [line.at for line in events if line.at is not None]
        if turn_changed and turn is not None:
            stamps.append(turn[1])
        # A stamp is trusted only up to when this watcher saw it (clock skew, hand-written lines).
        latest = min(max(stamps), first[1]) if stamps else first[1]
        earliest = min(min(stamps), since) if stamps else since

        chosen = relevant[-1] if relevant else (events[-1] if events else None)
        if chosen is not None:
            text = crewmod.cut(crewmod.clean_text(chosen.text, REASON_TEXT_BYTES), REASON_TEXT_BYTES)
            wake = Wake("signal", f"{name}.status", f"signal: {name}.status: {text}")
        else:
            wake = Wake("signal", f"{name}.turn-ended", f"signal: {name}.turn-ended")
        rank = 2 if any(line.verb in URGENT_VERBS for line in relevant) else 1 if relevant else 0
        return _Candidate(wake, pending, rank, latest, earliest)

    def _closed_decisions(self, name: str) -> set[int]:
        """Where the decisions of crew *name* that the captain answered start (the whole log:
        a keyless decision's key is its line number)."""
        span = crewlog.read_span(str(crewmod.path(self.home, name, crewmod.STATUS)), 0)
        return set() if span is None else crewlog.closed_decisions(span[3])

    def _advance(self, pending: _Pending) -> None:
        self.fleet.forget(pending.crew, crewmod.SIGNAL_CURSOR)
        self.fleet.forget(pending.crew, crewmod.TURN_SEEN)
        if pending.cursor is not None:
            crewmod.write_cursor(crewmod.path(self.home, pending.crew, crewmod.SIGNAL_CURSOR), pending.cursor)
        if pending.turn_seen is not None:
            atomic_write(crewmod.path(self.home, pending.crew, crewmod.TURN_SEEN),
                         (pending.turn_seen + "\n").encode())

    def _working(self, member: crewmod.Crew) -> bool:
        # (read from the crew's own pane only: firstmate.watch.backends.panes; a crew of
        # another host has its pane there, never in the local tmux, and a reading over SSH would
        # stand between a report and its wake: it is not read)
        return (self.backend is not None and member.host is None
                and pane_busy(self.backend, member))

    def _note_once(self, ctx: PollContext, topic: str, message: str) -> None:
        if topic not in self._noted:
            self._noted.add(topic)
            ctx.triage(message)
