"""A joined home's outbox: its crews' own status logs, read from per-crew cursors.

A remote crew reports exactly as a local one does (``fm crew status`` appends one line to
``state/crew/C.status``, its harness's turn-end hook appends to ``C.turn-ended``): those
append-only files in the home's private state *are* the outbox, durable on this host before
anything is sent. The forwarder turns what follows each crew's cursor into events:

``crew``    the crew's registration changed (its pane, and the pane's program: :func:`crew_text`),
            or it left (empty text)
``status``  one status line, the ``n``-th non-blank line the crew wrote since the outbox began
``turn``    the turn-end marker changed (a turn end, or several while nothing was sent)

Each event's number is fixed by the files alone, so an event sent again after a crash (the
cursor is saved only after JetStream acknowledged what it covers) carries the same message id
and is dropped as a duplicate, by JetStream within its window and by the primary's relay always.
Cursors live in ``state/fleet/out/C.cursor``; ``state/fleet/out/epoch`` names this outbox. A
fresh outbox (``fm fleet join``) starts every existing crew at the end of its log: what was
reported before the home joined stays here.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterable, Iterator

import attrs

from firstmate.base.safepaths import atomic_write, make_private_dir, open_private
from firstmate.fast import crewlog
from firstmate.fast.crewreport import PANE, STATUS, TURN_ENDED
from firstmate.fleet import names
from firstmate.fleet.wire import Event
from firstmate.store.home import Home

OUT = "out"
EPOCH = "epoch"
CURSOR = ".cursor"
#: Most bytes of one crew's log read for one batch of events.
READ_LIMIT = 1 << 18


@attrs.frozen
class Cursor:
    """How far one crew's events went out: its log (inode, offset) and the counts so far."""

    inode: int = 0
    offset: int = 0
    n: int = 0
    turn_sig: str = ""
    turn_n: int = 0
    pane: str = ""
    crew_n: int = 0
    #: The log's first bytes (hex) when it was first read: a log removed and made again can
    #: get the old one's inode back, never its first line (stamped to the millisecond).
    head: str = ""

    def encode(self) -> bytes:
        return json.dumps(attrs.asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Cursor | None:
        try:
            data = json.loads(raw or b"")
            return cls(int(data["inode"]), int(data["offset"]), int(data["n"]),
                       str(data["turn_sig"]), int(data["turn_n"]), str(data["pane"]),
                       int(data["crew_n"]), str(data.get("head", "")))
        except (ValueError, TypeError, KeyError):
            return None


def out_dir(home: Home) -> str:
    return os.path.join(os.fspath(home.state), "fleet", OUT)


@attrs.define(eq=False)
class Outbox:
    home: Home
    fleet: str
    host: str
    epoch: str
    _cursors: dict[str, Cursor] = attrs.field(factory=dict, init=False)
    _panes: dict[str, tuple[tuple[int, int, int], str]] = attrs.field(factory=dict, init=False)
    #: The crews the last :meth:`pending` looked at (what a look costs: one per crew).
    looked: int = attrs.field(default=0, init=False)

    @classmethod
    def open(cls, home: Home, fleet: str, host: str) -> Outbox:
        """This home's outbox; a new one (a fresh epoch) starts every crew at its log's end."""
        directory = out_dir(home)
        make_private_dir(os.path.dirname(directory))
        make_private_dir(directory)
        epoch_path = os.path.join(directory, EPOCH)
        raw = _read(epoch_path, 64)
        epoch = (raw or b"").decode("ascii", "replace").strip()
        box = cls(home, fleet, host, epoch)
        if not names.TOKEN_RE.fullmatch(epoch):
            box.epoch = "e" + secrets.token_hex(6)
            for name, _pane in box.registered():
                box._cursors[name] = box._at_end(name)
                box.save(name)
            atomic_write(epoch_path, (box.epoch + "\n").encode())
        return box

    # --- what there is -------------------------------------------------------------------------

    def registered(self) -> list[tuple[str, str]]:
        return [(name, pane) for name, pane, _ in crewlog.registered(
            os.fspath(self.home.crew_dir))]

    def cursor(self, name: str) -> Cursor:
        found = self._cursors.get(name)
        if found is None:
            found = Cursor.decode(_read(self._path(name), 4096)) or Cursor()
            self._cursors[name] = found
        return found

    def pending(self, only: Iterable[str] | None = None) -> list[str]:
        """The crews with something not sent yet. Every crew: one listing of ``state/crew``
        and the ``lstat`` of each crew's files; *only*: the ``lstat`` of those crews' files
        alone. A registration is read again only when it changed."""
        files: dict[str, dict[str, os.stat_result]] = {}
        if only is None:
            try:
                with os.scandir(self.home.crew_dir) as entries:
                    for entry in entries:
                        base, dot, suffix = entry.name.rpartition(".")
                        if dot and base and ("." + suffix) in (PANE, STATUS, TURN_ENDED):
                            try:
                                files.setdefault(base, {})["." + suffix] = entry.stat(
                                    follow_symlinks=False)
                            except OSError:
                                continue
            except OSError:
                files = {}
            candidates = {*files, *self._known_cursors()}
        else:
            candidates = {name for name in only if names.CREW_RE.fullmatch(name)}
            crew_dir = os.fspath(self.home.crew_dir)
            for name in candidates:
                for suffix in (PANE, STATUS, TURN_ENDED):
                    try:
                        files.setdefault(name, {})[suffix] = os.lstat(
                            crewlog.crew_path(crew_dir, name, suffix))
                    except OSError:
                        continue
        found = []
        self.looked = 0
        for name in sorted(candidates):
            if not names.CREW_RE.fullmatch(name):
                continue
            self.looked += 1
            cursor = self.cursor(name)
            mine = files.get(name, {})
            if self._pane(name, mine.get(PANE)) != cursor.pane:
                found.append(name)
                continue
            turn = mine.get(TURN_ENDED)
            if turn is not None and _sig(turn) != cursor.turn_sig:
                found.append(name)
                continue
            status = mine.get(STATUS)
            if status is not None and (status.st_ino != cursor.inode
                                       or status.st_size != cursor.offset):
                found.append(name)
        return found

    def _pane(self, name: str, st: os.stat_result | None) -> str:
        """The crew's registered pane ("" when it is not registered), cached by its lstat."""
        if st is None:
            self._panes.pop(name, None)
            return ""
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        known = self._panes.get(name)
        if known is not None and known[0] == key:
            return known[1]
        found = crewlog.read_registration(os.fspath(self.home.crew_dir), name)
        pane = "" if found is None else crew_text(found[0])
        self._panes[name] = (key, pane)
        return pane

    def take(self, name: str) -> list[tuple[Event, Cursor]]:
        """The crew's next events in order, each with the cursor that follows it (none: sent)."""
        cursor = self.cursor(name)
        events: list[tuple[Event, Cursor]] = []
        registration = crewlog.read_registration(os.fspath(self.home.crew_dir), name) \
            if names.CREW_RE.fullmatch(name) else None
        pane = "" if registration is None else crew_text(registration[0])
        if pane != cursor.pane:
            cursor = attrs.evolve(cursor, pane=pane, crew_n=cursor.crew_n + 1)
            events.append((self._event("crew", name, cursor.crew_n, time.time(), pane), cursor))
        path = crewlog.crew_path(os.fspath(self.home.crew_dir), name, STATUS)
        head = _head(path)
        if cursor.head and not (head.startswith(cursor.head) or cursor.head.startswith(head)):
            cursor = attrs.evolve(cursor, inode=0, offset=0)  # (another log, on a reused inode)
        span = crewlog.read_span(path, cursor.offset, inode=cursor.inode, limit=READ_LIMIT)
        if span is not None:
            inode, _start, _end, lines = span
            for text, at, _line_start, line_end in lines:
                cursor = attrs.evolve(cursor, inode=inode, offset=line_end, n=cursor.n + 1,
                                      head=head)
                stamp = at if at is not None else time.time()
                events.append((self._event("status", name, cursor.n, stamp, text), cursor))
            if cursor.inode != inode or cursor.offset < _end:
                cursor = attrs.evolve(cursor, inode=inode, offset=_end, head=head)
                if not lines:  # (only blank lines: nothing to send, but the cursor moves)
                    self._cursors[name] = cursor
        sig = self._turn_sig(name)
        if sig is not None and sig != cursor.turn_sig:
            cursor = attrs.evolve(cursor, turn_sig=sig, turn_n=cursor.turn_n + 1)
            events.append((self._event("turn", name, cursor.turn_n, self._turn_at(name), ""),
                           cursor))
        return events

    def advance(self, name: str, cursor: Cursor) -> None:
        self._cursors[name] = cursor

    def save(self, name: str) -> None:
        """Keep the crew's cursor (no fsync: a cursor lost in a crash sends its events again,
        which the ids make harmless)."""
        atomic_write(self._path(name), self.cursor(name).encode(), durable=False)

    def backlog(self) -> int:
        """Bytes of status logs not sent yet (for fm fleet status)."""
        total = 0
        for name, _pane in self.registered():
            cursor = self.cursor(name)
            try:
                st = os.lstat(crewlog.crew_path(os.fspath(self.home.crew_dir), name, STATUS))
            except OSError:
                continue
            total += st.st_size - (cursor.offset if st.st_ino == cursor.inode else 0)
        return max(0, total)

    # --- internals -----------------------------------------------------------------------------

    def _event(self, kind: str, name: str, n: int, at: float, text: str) -> Event:
        return Event(self.fleet, self.host, self.epoch, kind, name, n, round(at, 3), text)

    def _path(self, name: str) -> str:
        return os.path.join(out_dir(self.home), name + CURSOR)

    def _known_cursors(self) -> Iterator[str]:
        try:
            entries = os.listdir(out_dir(self.home))
        except OSError:
            return
        for entry in entries:
            if entry.endswith(CURSOR) and names.CREW_RE.fullmatch(entry[:-len(CURSOR)]):
                yield entry[:-len(CURSOR)]

    def _turn_sig(self, name: str) -> str | None:
        try:
            st = os.lstat(crewlog.crew_path(os.fspath(self.home.crew_dir), name, TURN_ENDED))
        except OSError:
            return None
        return _sig(st)

    def _turn_at(self, name: str) -> float:
        path = crewlog.crew_path(os.fspath(self.home.crew_dir), name, TURN_ENDED)
        raw = _read(path, 8192) or b""
        last = raw.rstrip(b"\n").rsplit(b"\n", 1)[-1].strip()
        try:
            return float(last)
        except ValueError:
            try:
                return os.lstat(path).st_mtime
            except OSError:
                return time.time()

    def _at_end(self, name: str) -> Cursor:
        crew_dir = os.fspath(self.home.crew_dir)
        path = crewlog.crew_path(crew_dir, name, STATUS)
        try:
            st = os.lstat(path)
            inode, offset = st.st_ino, st.st_size
        except OSError:
            inode, offset = 0, 0
        return Cursor(inode, offset, turn_sig=self._turn_sig(name) or "", head=_head(path))


def crew_text(binding: crewlog.Binding) -> str:
    """What a ``crew`` event says of a registration: its pane, then (after a TAB) its program's
    pid and start time when they were recorded, which the primary binds the crew to."""
    pane, _label, pid, started, _host = binding
    if pid is None:
        return pane
    return f"{pane}\t{pid}" + ("" if started is None else f" {started}")


def _sig(st: os.stat_result) -> str:
    """A turn-end marker's signature: any append or touch changes it."""
    return f"{st.st_ino} {st.st_size} {st.st_mtime_ns}"


def _head(path: str) -> str:
    """The first bytes of a log (hex; "" when it is absent or empty)."""
    return (_read(path, 32) or b"").hex()


def _read(path: str, limit: int) -> bytes | None:
    try:
        fd = open_private(path, os.O_RDONLY)
    except Exception:  # absent (or refused: a symlink reads as nothing here)
        return None
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


__all__ = ["CURSOR", "EPOCH", "OUT", "PANE", "Cursor", "Outbox", "crew_text", "out_dir"]
