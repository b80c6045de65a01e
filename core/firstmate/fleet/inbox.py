"""The primary's side of a remote crew's report: committed once, in order, into the home's files.

The relay hands each batch it fetched from JetStream to :meth:`Inbox.commit`, which makes every
new event part of the home exactly as a local crew's report is — a line appended to
``state/crew/H.C.status``, a line on ``H.C.turn-ended``, a registration ``H.C.pane`` naming
the crew's pane on host H (its id, program and start time there, and a ``host H`` line) — so
every reader (the status source, the drain, ``fm crew list``,
``fm top``) sees remote crews as crews of this home. Only then does the relay acknowledge the
messages to JetStream.

Exactly once, through a crash at any instant:

1. **Dedupe, in one transaction with the intents.** An event is the ``n``-th of its kind for one
   crew of one host's outbox (``epoch``); ``fleet_seen`` keeps the newest ``n`` applied, so an
   id at or below it is a duplicate (JetStream redelivering what was never acknowledged, or a
   host publishing again what it was not sure had arrived) and is dropped. A duplicate that
   arrives as a *new* stream message — a stream sequence past the one the applied id came with —
   was published again: a replay, refused and reported.
2. **Write-ahead intents.** The target files are locked (``flock``, the lock every reporter
   takes) and their sizes read; in the same transaction as the dedupe, each new line is recorded
   in ``fleet_inbox`` with the offset it will have. Then the lines are appended, the locks
   released and, in a second transaction, the intents deleted.
3. **Order.** A host sends a crew's next event only once JetStream acknowledged the last, so
   the stream holds each crew's events in order; but a message JetStream delivered to a fetch
   whose connection was lost comes again only after its acknowledgement wait. An event whose
   predecessor was not applied yet is therefore held — not applied, not acknowledged — and the
   relay has everything unacknowledged delivered again, in stream order
   (:class:`Gap`, :mod:`firstmate.fleet.relay`).
4. **Recovery.** A relay that starts finds the intents a crash left: a line whose bytes are at
   its recorded offset was appended; any other is appended now. So a crash between the commit
   and the append neither loses the line nor writes it twice.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Sequence

import attrs

from firstmate.base.errors import FirstmateError
from firstmate.base.safepaths import atomic_write, make_private_dir, open_private
from firstmate.fast import crewlog, crewreport
from firstmate.fast.crewreport import TURN_MARKER_MAX, status_text
from firstmate.fleet import names
from firstmate.fleet.wire import Event
from firstmate.store import crew as crewmod
from firstmate.store.database import Store
from firstmate.store.home import Home

#: An intent's ``start`` for a registration: the file is replaced whole (empty data: removed).
REPLACE = -1


@attrs.frozen
class Incoming:
    """One message as the relay fetched it: its event and its stream sequence."""

    event: Event
    stream_seq: int


@attrs.frozen
class Refusal:
    host: str
    code: str
    detail: str = ""


#: One sequence of events: ``(host, epoch, crew, kind)``.
Key = tuple[str, str, str, str]


@attrs.frozen
class Gap:
    """An event that came before one it follows: *expected* is the next number to apply."""

    key: Key
    expected: int
    got: int
    msg_id: str


@attrs.frozen
class Outcome:
    applied: int = 0
    duplicates: int = 0
    refused: tuple[Refusal, ...] = ()
    #: Hosts that said hello in this batch.
    hellos: tuple[str, ...] = ()
    #: Events held back (neither applied nor to be acknowledged): an earlier one is missing.
    gaps: tuple[Gap, ...] = ()


@attrs.frozen
class _Intent:
    msg_id: str
    name: str
    suffix: str
    start: int
    data: bytes


@attrs.define(eq=False)
class Inbox:
    home: Home
    store: Store
    #: Intents were recorded and may not all be applied (a failure mid-batch): the next batch
    #: finishes them first, as a starting relay does.
    _dirty: bool = attrs.field(default=False, init=False)

    # --- the batch -----------------------------------------------------------------------------

    def commit(self, batch: Sequence[Incoming], *, refused_before: Sequence[Refusal] = (),
               accept: Iterable[Key] = (), now: float | None = None) -> Outcome:
        """Apply every new event of *batch* (in its order) once; see the module docstring.
        *refused_before*: the batch's messages the relay refused itself, counted here too.
        An event whose predecessor was not applied is held (:attr:`Outcome.gaps`), unless its
        sequence is in *accept* (the relay found the predecessor gone from the stream)."""
        now = time.time() if now is None else now
        refused: list[Refusal] = list(refused_before)
        hellos: list[str] = []
        wanted: list[tuple[Incoming, str]] = []
        for item in batch:
            event = item.event
            if event.kind == names.HELLO:
                hellos.append(event.host)
                continue
            name = self._name(event, refused)
            if name is not None:
                wanted.append((item, name))
        if self._dirty:
            self.recover()  # (a batch that failed half-way left intents to finish first)
        locks = _Locks(self.home)
        try:
            for item, name in wanted:
                if item.event.kind != "crew":
                    locks.open(name, _suffix(item.event.kind))
            intents, duplicates, gaps = self._record(wanted, locks, refused, hellos,
                                                     frozenset(accept), now)
            self._dirty = bool(intents)
            self._apply(intents, locks)
        finally:
            locks.close()
        if intents:
            self._settle(intents)
            self._dirty = False
            crewreport.note_changed(str(self.home.root), *{i.name for i in intents})
            crewreport.ring(str(self.home.root))
        return Outcome(len(intents), duplicates, tuple(refused), tuple(hellos), tuple(gaps))

    def _name(self, event: Event, refused: list[Refusal]) -> str | None:
        """The primary's crew for *event*, registered now if it was not; None when refused."""
        name = names.primary_name(event.host, event.crew)
        if name is None:
            refused.append(Refusal(event.host, "crew name too long",
                                   f"{event.host}.{event.crew} is over 64 characters"))
            return None
        crew_dir = self.home.crew_dir
        found = crewlog.read_registration(str(crew_dir), name)
        if found is None:
            if event.kind == "crew" and not event.text:
                return name  # (a crew that left before it was ever registered here)
            make_private_dir(self.home.state)
            make_private_dir(crew_dir)
            crewmod.add(self.home, name, names.UNKNOWN_PANE, host=event.host)
        elif found[0][4] != event.host:
            refused.append(Refusal(event.host, "crew name taken",
                                   f"{name} is a crew of this home; rename it, or the crew "
                                   f"{event.crew} on {event.host}"))
            return None
        return name

    def _record(self, wanted: Iterable[tuple[Incoming, str]], locks: _Locks,
                refused: list[Refusal], hellos: Sequence[str], accept: frozenset[Key],
                now: float) -> tuple[list[_Intent], int, list[Gap]]:
        intents: list[_Intent] = []
        gaps: list[Gap] = []
        duplicates = 0
        counts: dict[str, int] = {}
        with self.store.transaction() as conn:
            for item, name in wanted:
                event = item.event
                key = (event.host, event.epoch, event.crew, event.kind)
                row = conn.execute(
                    "SELECT n, stream_seq FROM fleet_seen WHERE host = ? AND epoch = ? AND "
                    "crew = ? AND kind = ?", key).fetchone()
                last = 0 if row is None else int(row[0])
                if row is not None and event.n <= last:
                    duplicates += 1
                    if item.stream_seq > int(row[1]):
                        refused.append(Refusal(event.host, "replayed message",
                                               f"{event.msg_id} was applied before"))
                    continue
                if event.n > last + 1 and key not in accept:
                    # (its predecessor went to a fetch the connection lost, and comes again)
                    gaps.append(Gap(key, last + 1, event.n, event.msg_id))
                    continue
                conn.execute(
                    "INSERT INTO fleet_seen (host, epoch, crew, kind, n, stream_seq, at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (host, epoch, crew, kind) DO "
                    "UPDATE SET n = excluded.n, stream_seq = excluded.stream_seq, "
                    "at = excluded.at", (*key, event.n, item.stream_seq, now))
                intent = self._intent(event, name, locks)
                counts[event.host] = counts.get(event.host, 0) + 1
                if intent is None:
                    continue
                conn.execute("INSERT INTO fleet_inbox (msg_id, name, suffix, start, data) "
                             "VALUES (?, ?, ?, ?, ?)", (intent.msg_id, intent.name,
                                                         intent.suffix, intent.start,
                                                         intent.data))
                intents.append(intent)
            self._count(conn, counts, refused, hellos, now)
        return intents, duplicates, gaps

    def _intent(self, event: Event, name: str, locks: _Locks) -> _Intent | None:
        if event.kind == "crew":
            data = _registration(event.host, event.text) if event.text else b""
            return _Intent(event.msg_id, name, crewmod.PANE, REPLACE, data)
        if event.kind == "status":
            text = status_text(event.text)
            if not text:
                return None  # (nothing a reader would show: the id is spent all the same)
            line = f"{event.at:.3f}\t{text}\n".encode()
        else:
            line = f"{event.at:.3f}\n".encode()
        suffix = _suffix(event.kind)
        start, needs_break = locks.reserve(name, suffix, len(line))
        return _Intent(event.msg_id, name, suffix, start, (b"\n" if needs_break else b"") + line)

    @staticmethod
    def _count(conn: sqlite3.Connection, counts: dict[str, int], refused: Sequence[Refusal],
               hellos: Sequence[str], now: float) -> None:
        for host in {*counts, *hellos}:
            conn.execute("INSERT INTO fleet_hosts (host, seen_at, events) VALUES (?, ?, ?) "
                         "ON CONFLICT (host) DO UPDATE SET seen_at = excluded.seen_at, "
                         "events = events + excluded.events", (host, now, counts.get(host, 0)))
        for refusal in refused:
            conn.execute("INSERT INTO fleet_hosts (host, refused, last_refusal) VALUES "
                         "(?, 1, ?) ON CONFLICT (host) DO UPDATE SET refused = refused + 1, "
                         "last_refusal = excluded.last_refusal",
                         (refusal.host[:64], refusal.code))

    # --- applying ------------------------------------------------------------------------------

    def _apply(self, intents: Sequence[_Intent], locks: _Locks) -> None:
        for intent in intents:
            if intent.start == REPLACE:
                self._register(intent)
            else:
                locks.append(intent.name, intent.suffix, intent.data)

    def _register(self, intent: _Intent) -> None:
        """A remote crew's pane changed (registered anew, keeping its logs), or it left
        (unregistered, its logs kept). Never brings back a crew removed here meanwhile."""
        if not crewmod.exists(self.home, intent.name):
            return
        if intent.data:
            pane, _label, pid, started, host = crewlog.parse_registration(
                intent.data.decode("utf-8", "replace"))
            crewmod.add(self.home, intent.name, pane or names.UNKNOWN_PANE, replace=True,
                        pid=pid, started=started, host=host)
        else:
            crewmod.unregister(self.home, intent.name)

    def _settle(self, intents: Sequence[_Intent]) -> None:
        """Delete applied intents, then keep turn-end markers small (never while an intent
        names one: its recorded offset must still hold for recovery)."""
        with self.store.transaction() as conn:
            conn.executemany("DELETE FROM fleet_inbox WHERE msg_id = ?",
                             [(intent.msg_id,) for intent in intents])
        for name in {i.name for i in intents if i.suffix == crewmod.TURN_ENDED}:
            _compact_marker(crewmod.path(self.home, name, crewmod.TURN_ENDED))

    def recover(self) -> int:
        """Finish what a crash left between an intent's commit and its deletion; how many
        lines had to be appended (the rest were already in place)."""
        with self.store.reading() as conn:
            rows = conn.execute("SELECT msg_id, name, suffix, start, data FROM fleet_inbox "
                                "ORDER BY id").fetchall()
        if not rows:
            return 0
        intents = [_Intent(str(r[0]), str(r[1]), str(r[2]), int(r[3]), bytes(r[4]))
                   for r in rows]
        appended = 0
        locks = _Locks(self.home)
        try:
            for intent in intents:
                if intent.start == REPLACE:
                    self._register(intent)
                    continue
                locks.open(intent.name, intent.suffix)
                if not locks.holds(intent.name, intent.suffix, intent.start, intent.data):
                    _start, needs_break = locks.reserve(intent.name, intent.suffix, 0)
                    line = intent.data.lstrip(b"\n")
                    locks.append(intent.name, intent.suffix,
                                 (b"\n" if needs_break else b"") + line)
                    appended += 1
        finally:
            locks.close()
        self._settle(intents)
        crewreport.note_changed(str(self.home.root), *{i.name for i in intents})
        crewreport.ring(str(self.home.root))
        return appended


def _suffix(kind: str) -> str:
    return crewmod.STATUS if kind == "status" else crewmod.TURN_ENDED


def _pane(text: str) -> str:
    """A host's pane id as a registration may carry it: one printable word, cut."""
    word = "".join(c for c in text if c.isprintable() and not c.isspace())
    return word[:64]


def _number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else None


def _registration(host: str, text: str) -> bytes:
    """The primary's registration of a host's crew whose ``crew`` event says *text*
    (:func:`firstmate.fleet.outbox.crew_text`: the pane on that host, then its program's pid
    and start time there)."""
    pane, _, program = text.partition("\t")
    words = program.split()
    pid = _number(words[0]) if words else None
    started = _number(words[1]) if pid is not None and len(words) > 1 else None
    return crewlog.encode_registration((_pane(pane) or names.UNKNOWN_PANE, None, pid, started,
                                        host))


def _compact_marker(path: os.PathLike[str] | str) -> None:
    try:
        size = os.lstat(path).st_size
    except OSError:
        return
    if size <= TURN_MARKER_MAX:
        return
    fd = open_private(path, os.O_RDONLY)
    try:
        tail = os.pread(fd, 64, max(0, size - 64))
    finally:
        os.close(fd)
    lines = tail.rstrip(b"\n").rsplit(b"\n", 1)
    atomic_write(path, lines[-1] + b"\n", durable=False)


class _Locks:
    """The crew files one batch appends to, each open and ``flock``-ed (in path order, as the
    batch first names them) until :meth:`close`; sizes tracked as intents reserve space."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.fds: dict[str, int] = {}
        self.ends: dict[str, int] = {}

    def _path(self, name: str, suffix: str) -> str:
        return os.fspath(crewmod.path(self.home, name, suffix))

    def open(self, name: str, suffix: str) -> None:
        import fcntl

        path = self._path(name, suffix)
        if path in self.fds:
            return
        fd = open_private(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            os.close(fd)
            raise FirstmateError(f"cannot lock {path}: {exc.strerror}") from exc
        self.fds[path] = fd
        self.ends[path] = os.fstat(fd).st_size

    def reserve(self, name: str, suffix: str, length: int) -> tuple[int, bool]:
        """Where a line of *length* bytes will start, and whether a line break must come first
        (the file ends in a torn line: only its own end can, lines reserved here end whole)."""
        path = self._path(name, suffix)
        fd, end = self.fds[path], self.ends[path]
        needs_break = end == os.fstat(fd).st_size and end > 0 and os.pread(fd, 1, end - 1) != b"\n"
        self.ends[path] = end + length + (1 if needs_break else 0)
        return end, needs_break

    def holds(self, name: str, suffix: str, start: int, data: bytes) -> bool:
        fd = self.fds[self._path(name, suffix)]
        return os.pread(fd, len(data), start) == data

    def append(self, name: str, suffix: str, data: bytes) -> None:
        """Append *data* whole or not at all (a write cut short is rolled back)."""
        path = self._path(name, suffix)
        fd = self.fds[path]
        before = os.fstat(fd).st_size
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view):]
        except OSError as exc:
            try:  # noqa: SIM105
                os.ftruncate(fd, before)
            except OSError:
                pass
            raise FirstmateError(f"cannot append to {path}: {exc.strerror}; free disk space: "
                                 "the relay tries again and nothing is lost") from exc

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)  # (closing the descriptor releases its flock)
        self.fds.clear()


__all__ = ["REPLACE", "Gap", "Inbox", "Incoming", "Key", "Outcome", "Refusal"]
