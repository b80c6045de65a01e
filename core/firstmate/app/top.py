"""What ``fm top`` shows: one frame of a home, gathered read-only, as frozen values.

A :class:`Gatherer` reads the home the way ``fm status`` does (the watcher's lock and beacon,
the queue, the episode, the away record) plus the crews' registrations and status logs and the
delivery ledger. It never creates a home, a database or a file, and unlike ``fm status`` it
publishes no downtime either: a viewer changes nothing.

**Noticing a change.** The doorbell (:mod:`firstmate.store.doorbell`) is one datagram socket
bound by the watcher; a ring is received by exactly one reader, so a second listener would
steal the watcher's wakes (and cannot bind the address anyway). A fan-out would put a second
send on every writer's hot path (``fm crew status``, ``fm wake append``) for a viewer that is
usually not running. So the viewer watches instead: :meth:`Gatherer.fingerprint` is a few
``stat`` calls and ``PRAGMA data_version`` on its open connection (which changes whenever
another connection commits), cheap enough to take ten times a second.

**Latency of a wake.** A delivery (``deliveries``: when the watcher printed its reason) is
matched to the queue row carrying the same reason line appended before it: the watcher appends
the row of a crew signal, a check or a heartbeat just before it closes; a queued row was
appended by a producer earlier. *append latency* is the delivery time minus that row's ``at``.
Rows are deleted when the primary acknowledges them, so the gatherer remembers the rows it has
seen; a wake whose row was acknowledged before the viewer started shows no append latency. For
a crew signal (``signal: NAME.status: …`` or ``signal: NAME.turn-ended``) *event latency* is the
delivery time minus the crew's own stamp on that line (or turn end): how long the report waited.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import stat
import time
from collections.abc import Mapping
from pathlib import Path

import attrs

from firstmate.base.envnum import finite
from firstmate.base.errors import FirstmateError
from firstmate.store import crew as crewmod
from firstmate.store.database import DELIVERIES_KEEP, Store
from firstmate.store.deliveries import Delivery
from firstmate.store.home import Home

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate.watch.backends.hosts import CrewPanes

#: Wakes a frame carries.
WAKES_SHOWN = 5
#: Queue rows remembered for matching deliveries (newest kept).
ROWS_REMEMBERED = 512
#: Bytes of a crew's status log searched for the line a signal wake names.
EVENT_TAIL = 1 << 18
#: Clock slack when matching a stamp to the delivery that followed it (seconds).
SLACK = 1.0
#: Longest a frame waits for a fleet host's panes (seconds).
HOST_WAIT = 2.0

_SIGNAL = re.compile(r"signal: ([A-Za-z0-9_-][A-Za-z0-9._-]*?)\.(status: (.*)|turn-ended\b.*)$",
                     re.DOTALL)
_WITH = re.compile(r" \(with .*\)$")


@attrs.frozen
class WatcherView:
    #: ``none``, ``healthy``, ``stale-beacon`` or ``unverified`` (:mod:`firstmate.store.health`).
    state: str = "none"
    pid: int | None = None
    #: When the beacon was last touched (epoch), None without one.
    beacon_at: float | None = None
    grace: float = 0.0


@attrs.frozen
class CrewView:
    name: str
    pane: str
    #: The newest line the crew reported (cleaned), "" when it reported none.
    status: str = ""
    status_at: float | None = None
    turn_ended_at: float | None = None
    #: Why this crew's files could not be read, if they could not.
    problem: str | None = None
    #: Its pane as tmux says it is now (``live``, ``dead``, ``gone``, ``unknown``), if asked.
    pane_state: str | None = None
    #: The harness ``fm crew spawn`` started, None for a crew registered by hand.
    harness: str | None = None
    #: The keys of its open decisions, oldest first.
    decisions: tuple[str, ...] = ()


@attrs.frozen
class WakeView:
    #: When the watcher delivered the reason (epoch).
    at: float
    reason: str
    watcher_pid: int
    #: Delivery minus the crew's stamp of the event the reason names (seconds), if known.
    event_latency: float | None = None
    #: Delivery minus the ``at`` of the queue row carrying the reason (seconds), if known.
    append_latency: float | None = None


@attrs.frozen
class Frame:
    """One look at a home. Times are epoch seconds; ``now`` is when it was taken."""

    home: str
    now: float
    #: False when the home (or its ``state/``) does not exist yet.
    exists: bool = False
    watcher: WatcherView = WatcherView()
    depth: int = 0
    oldest_seq: int | None = None
    oldest_at: float | None = None
    episode: str | None = None
    away: bool = False
    crews: tuple[CrewView, ...] = ()
    wakes: tuple[WakeView, ...] = ()
    #: A one-line reason the home could not be read (unsafe or damaged state).
    problem: str | None = None
    #: With no healthy watcher: what brings it back, said to the person watching
    #: (firstmate.fast.rearmadvice).
    restart: str = ""

    def steady(self) -> Frame:
        """This frame without what changes by itself (the clock, the beacon's touches): two
        frames with equal steady parts show the same state of the home."""
        return attrs.evolve(self, now=0.0, watcher=attrs.evolve(self.watcher, beacon_at=None))


@attrs.frozen
class _LogView:
    """What a frame shows of one crew's status log: its newest own line, its open decisions."""

    last: crewmod.StatusLine | None
    decisions: tuple[str, ...]


@attrs.frozen
class _Row:
    at: float
    reason: str


@attrs.define(eq=False)
class Gatherer:
    """Reads frames of the home at *root*; keeps one read-only connection and what it has seen."""

    root: Path
    env: Mapping[str, str] = attrs.field(factory=lambda: dict(os.environ))
    wakes_shown: int = WAKES_SHOWN
    _store: Store | None = None
    _db_id: tuple[int, int] | None = None
    _rows: dict[int, _Row] = attrs.Factory(dict)
    _top_seq: int = 0
    _used: set[int] = attrs.Factory(set)
    _wakes: dict[tuple[float, int, str], WakeView] = attrs.Factory(dict)
    _last_lines: dict[str, tuple[tuple[int, int, int], _LogView]] = attrs.Factory(dict)
    #: The tmux servers crews' panes are on (this machine's, and fleet hosts' over SSH).
    _crew_panes: CrewPanes | None = None

    @property
    def home(self) -> Home:
        return Home(self.root)

    # --- noticing changes ------------------------------------------------------------------

    def fingerprint(self) -> tuple[object, ...]:
        """Changes whenever something a frame shows may have changed, except the clock and the
        beacon's regular touches: the database's commits, the crews' files, the watcher's lock
        record, the away record. Never raises."""
        home = self.home
        parts: list[object] = [_stat_key(home.state), _stat_key(home.db),
                               _stat_key(home.lock_path("watch")), _stat_key(home.away_record),
                               os.path.lexists(home.beacon)]
        if self._store is not None and self._db_id == _file_id(home.db):
            try:
                parts.append(self._store.connection().execute("PRAGMA data_version").fetchone())
            except (sqlite3.Error, FirstmateError):
                parts.append(None)
        try:
            with os.scandir(home.crew_dir) as entries:
                parts.append(sorted((e.name, _stat_key(e.path)) for e in entries))
        except OSError:
            parts.append(None)
        return tuple(parts)

    # --- one frame -------------------------------------------------------------------------

    def gather(self, now: float | None = None) -> Frame:
        """The home as it is now. Unsafe state (a symlinked path, a foreign or damaged database)
        raises its :class:`~firstmate.base.errors.FirstmateError`, as ``fm status`` does."""
        from firstmate.base.safepaths import refuse_non_directory
        from firstmate.store import health
        from firstmate.store.home import refuse_symlink

        home = self.home
        now = time.time() if now is None else now
        frame = Frame(str(home.root), now)
        refuse_non_directory(home.root)
        refuse_non_directory(home.state)
        if not home.state.is_dir():
            self.close()
            return frame
        refuse_symlink(home.lock_path(health.LOCK_NAME))
        refuse_symlink(home.beacon)
        watcher = health.watcher_health(home, self.env, now=now)
        beacon_at = None if watcher.beacon_age is None else now - watcher.beacon_age
        if beacon_at is None and watcher.pid is not None:
            beacon_at = health.beacon_mtime(home)
        restart = ""
        if not watcher.healthy:
            from firstmate.fast.rearmadvice import for_home

            restart = for_home(str(home.root))
        frame = attrs.evolve(
            frame, exists=True, away=home.away_record.exists(), restart=restart,
            watcher=WatcherView(watcher.state, watcher.pid, beacon_at, watcher.grace))
        frame = self._queue(frame)
        return attrs.evolve(frame, crews=self._crews())

    def frame(self, now: float | None = None) -> Frame:
        """:meth:`gather`, with unsafe or unreadable state shown in the frame instead of raised."""
        try:
            return self.gather(now)
        except FirstmateError as exc:
            self.close()
            return Frame(str(self.root), time.time() if now is None else now, exists=True,
                         problem=exc.message)
        except OSError as exc:
            self.close()
            return Frame(str(self.root), time.time() if now is None else now, exists=True,
                         problem=f"cannot read {exc.filename or self.root}: {exc.strerror or exc}")

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
        self._store = None
        self._db_id = None

    # --- the database ----------------------------------------------------------------------

    def _open(self) -> Store | None:
        home = self.home
        if not (home.db.exists() or home.db.is_symlink()):
            self.close()
            return None
        ident = _file_id(home.db)
        if self._store is None or ident != self._db_id:
            # A new or replaced database: what was remembered of the old one no longer holds.
            self.close()
            self._rows.clear()
            self._used.clear()
            self._top_seq = 0
            self._store = Store(home)
            self._db_id = ident
        return self._store

    def _queue(self, frame: Frame) -> Frame:
        from firstmate.store import deliveries, episodes, queue

        store = self._open()
        if store is None:
            return frame
        with store.reading() as conn:
            depth = queue.depth(conn)
            oldest = queue.oldest(conn)
            episode = episodes.read(conn)
            self._remember_rows(conn)
            recent = deliveries.recent(conn, DELIVERIES_KEEP)
        token = episode.token() if isinstance(episode, episodes.Episode) else None
        if isinstance(episode, episodes.Invalid):
            token = "invalid (the next watcher start sets it aside)"
        wakes = [self._wake(d) for d in reversed(recent)]  # oldest first: rows matched in order
        shown = tuple(reversed(wakes))[: max(0, self.wakes_shown)]
        return attrs.evolve(frame, depth=depth, oldest_seq=None if oldest is None else oldest.seq,
                            oldest_at=None if oldest is None else oldest.at, episode=token,
                            wakes=shown)

    def _remember_rows(self, conn: sqlite3.Connection) -> None:
        from firstmate.store.queue import VALID_SQL
        from firstmate.watch.sources.queued import reason_line

        found = conn.execute(
            f"SELECT seq, at, kind, payload FROM wakes WHERE seq > ? AND {VALID_SQL} "
            "ORDER BY seq DESC LIMIT ?", (self._top_seq, ROWS_REMEMBERED)).fetchall()
        for seq, at, kind, payload in found:
            with contextlib.suppress(TypeError, ValueError):
                self._rows[int(seq)] = _Row(float(at), reason_line(str(kind), str(payload)))
        if found:
            self._top_seq = max(self._top_seq, int(found[0][0]))
        for seq in sorted(self._rows)[: max(0, len(self._rows) - ROWS_REMEMBERED)]:
            del self._rows[seq]
            self._used.discard(seq)

    def _wake(self, delivery: Delivery) -> WakeView:
        key = (delivery.at, delivery.watcher_pid, delivery.identity)
        known = self._wakes.get(key)
        if known is not None:
            return known
        seq = next((s for s in sorted(self._rows) if s not in self._used
                    and self._rows[s].reason == delivery.reason
                    and self._rows[s].at <= delivery.at + SLACK), None)
        append = None
        if seq is not None:
            self._used.add(seq)
            append = max(0.0, delivery.at - self._rows[seq].at)
        stamp = self._event_stamp(delivery.reason, delivery.at)
        view = WakeView(delivery.at, delivery.reason, delivery.watcher_pid,
                        None if stamp is None else max(0.0, delivery.at - stamp), append)
        if len(self._wakes) >= 4 * DELIVERIES_KEEP:
            self._wakes.clear()
        self._wakes[key] = view
        return view

    def _event_stamp(self, reason: str, at: float) -> float | None:
        """The crew's own stamp of the line (or turn end) a signal reason names, if found."""
        match = _SIGNAL.match(reason)
        if match is None or not crewmod.NAME_RE.fullmatch(match.group(1)):
            return None
        name = match.group(1)
        try:
            if match.group(3) is None:
                return _newest_turn_end(self.home, name, at + SLACK)
            return _stamp_of(self.home, name, match.group(3), at + SLACK)
        except (OSError, FirstmateError):
            return None

    # --- crews -----------------------------------------------------------------------------

    def _crews(self) -> tuple[CrewView, ...]:
        home = self.home
        views: list[CrewView] = []
        for member, state in self._panes(crewmod.list(home)):
            view = CrewView(member.name, member.pane, pane_state=state)
            try:
                log = self._log(member.name)
                last = log.last
                turn = crewmod.turn_signature(home, member.name)
                view = attrs.evolve(
                    view, status="" if last is None else crewmod.clean_text(last.text),
                    status_at=None if last is None else last.at,
                    turn_ended_at=None if turn is None else turn[1],
                    harness=crewmod.harness(home, member.name), decisions=log.decisions)
            except (OSError, FirstmateError) as exc:
                message = exc.message if isinstance(exc, FirstmateError) else str(exc)
                view = attrs.evolve(view, problem=message)
            views.append(view)
        names = {view.name for view in views}
        for gone in set(self._last_lines) - names:
            del self._last_lines[gone]
        return tuple(views)

    def _panes(self, members: tuple[crewmod.Crew, ...]) -> tuple[tuple[crewmod.Crew, str], ...]:
        """Each crew and its pane's state, from one tmux call per server (read only: nothing is
        bound); a fleet host that does not answer within :data:`HOST_WAIT` seconds shows its
        crews ``unreachable`` rather than hold the frame."""
        from firstmate.app.crewops import pane_states
        from firstmate.watch.backends.hosts import CrewPanes

        if self._crew_panes is None:
            self._crew_panes = CrewPanes.from_env(self.home, self.env, cap=HOST_WAIT)
        return pane_states(self.home, self._crew_panes, members, bind=False)

    def _log(self, name: str) -> _LogView:
        """The crew's newest own line and open decisions, read again only when its log
        changed."""
        p = crewmod.path(self.home, name, crewmod.STATUS)
        key = _stat_key(p)
        cached = self._last_lines.get(name)
        if key is not None and cached is not None and cached[0] == key:
            return cached[1]
        view = _LogView(crewmod.last_line(self.home, name),
                        tuple(d.key for d in crewmod.open_decisions(self.home, name)))
        if key is not None:
            self._last_lines[name] = (key, view)
        return view


def _stat_key(path: str | Path) -> tuple[int, int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _stamp_of(home: Home, name: str, text: str, before: float) -> float | None:
    p = crewmod.path(home, name, crewmod.STATUS)
    try:
        size = os.lstat(p).st_size
    except FileNotFoundError:
        return None
    span = crewmod.read_span(p, max(0, size - EVENT_TAIL))
    if span is None:
        return None
    bare = _WITH.sub("", text)
    for line in reversed(span.lines):
        if line.at is not None and line.at <= before and line.text.strip() in (text, bare):
            return line.at
    return None


def _newest_turn_end(home: Home, name: str, before: float) -> float | None:
    raw = crewmod.read_text(crewmod.path(home, name, crewmod.TURN_ENDED))
    if raw is None:
        return None
    stamps = []
    for word in raw.split():
        with contextlib.suppress(ValueError):
            stamp = float(word)
            if finite(stamp):  # a marker written by hand may say anything: -inf, nan, 1e999
                stamps.append(stamp)
    found = [s for s in stamps if s <= before]
    if found:
        return max(found)
    turn = crewmod.turn_signature(home, name)  # a bare ``touch``: its time is the stamp
    return turn[1] if turn is not None and turn[1] <= before else None


__all__ = ["WAKES_SHOWN", "CrewView", "Frame", "Gatherer", "WakeView", "WatcherView"]
