"""The crew registry and the crews' status logs, kept as plain files in ``state/crew/``.

Files rather than the database, because crews and their harness hooks report from shells (a
status line is one ``O_APPEND`` write; a turn end may be a bare ``touch``). Per crew NAME:

``NAME.pane``           the registration: the crew's pane, bound to tmux's stable pane id, the target
                        it was added with as a label, and the pane's program (pid and start time;
                        :mod:`firstmate.fast.crewlog` describes the lines)
``NAME.status``         the status log: ``<epoch>\\t<line>`` per report, append-only
``NAME.turn-ended``     the turn-end marker: one ``<epoch>`` line appended (or touched) per turn end
``NAME.signal-cursor``  the watcher's status-source cursor (``<inode> <offset>``)
``NAME.turn-seen``      the watcher's last seen turn-end signature
``NAME.drain-cursor``   what drains presented (``<inode> <offset>``, then the turn-end marker's
                        signature when shown with lines): a mark the watcher honours too
``NAME.pane-state``     the stale source's pane hash record
``NAME.harness``        the harness ``fm crew spawn`` started the crew with (one line)
``NAME.pane-log``       the crew's last screen and scrollback, saved by ``fm crew stop``

No suffix ends with another, so two crew names can never share a file. Every file is 0600 and
is opened without following symlinks. Registrations are written under ``state/crew-registry.lock``,
so binding a registration that names a position (:func:`bind`) never brings back one that
``fm crew remove`` or ``stop`` just removed.

Decisions: a ``needs-decision:`` line opens a decision, keyed by ``key=K`` (or ``[key=K]``) right
after the verb, else by its line number (``line<N>``). It stays open until an
``answered: key=K <answer>`` line, written by :func:`answer` (``fm crew answer``), closes it.

Reading the registry, the logs and the cursors, and these line rules, are plain functions in
:mod:`firstmate.fast.crewlog` (shared with the ``fm wake drain`` fast path); the value classes
here wrap what they return.
"""

from __future__ import annotations

import builtins
import os
import re
from collections.abc import Iterable
from pathlib import Path

import attrs

from firstmate.base.errors import ConflictError, StateError, UsageError
from firstmate.fast import crewlog
from firstmate.fast.crewlog import MAX_PANE_CHARS as MAX_PANE_CHARS
from firstmate.fast.crewlog import cut as cut
from firstmate.fast.crewreport import MAX_STATUS_BYTES
from firstmate.store.home import Home, atomic_write, make_private_dir, refuse_symlink

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate.store.locks import FileLock

#: A crew's name: not starting with ``.`` (a hidden file) or ``-`` (an option to every command
#: that names a crew, so no command could address it).
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")
KEY_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
#: A fleet host's name (as :data:`firstmate.fleet.names.TOKEN_RE`, which the store cannot import).
HOST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")

PANE = crewlog.PANE
STATUS = crewlog.STATUS
TURN_ENDED = crewlog.TURN_ENDED
SIGNAL_CURSOR = ".signal-cursor"
TURN_SEEN = ".turn-seen"
DRAIN_CURSOR = crewlog.DRAIN_CURSOR
PANE_STATE = ".pane-state"
HARNESS = ".harness"
PANE_LOG = ".pane-log"
#: Every per-crew file, registration first (so removal unregisters before it deletes the rest).
SUFFIXES = (PANE, STATUS, TURN_ENDED, SIGNAL_CURSOR, TURN_SEEN, DRAIN_CURSOR, PANE_STATE, HARNESS,
            PANE_LOG)
#: What :func:`unregister` keeps: the crew's own record of its work.
LOGS = (STATUS, TURN_ENDED, PANE_LOG)
#: Longest pane log kept (bytes; the newest part is kept).
MAX_PANE_LOG = 1 << 20
#: The lock registrations are written under (``state/crew-registry.lock``), and how long a
#: writer waits for it (seconds).
REGISTRY_LOCK = "crew-registry"
REGISTRY_WAIT = 10.0


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


@attrs.frozen
class Crew:
    name: str
    #: The pane: tmux's stable id (``%12``) once bound; before that, the target as given.
    pane: str
    #: When the crew was registered (epoch seconds).
    added_at: float
    #: The target the crew was added with, when it differs from :attr:`pane` (shown, never used).
    label: str | None = None
    #: The pane's program when the crew was bound to it (None: not recorded; 0: unreadable).
    pid: int | None = None
    #: That program's start time, in clock ticks since boot (None: not recorded).
    started: int | None = None
    #: The fleet host whose tmux has the pane (None: this machine's; docs/fleet-remote.md).
    host: str | None = None

    @property
    def bound(self) -> bool:
        """Whether :attr:`pane` is a stable pane id rather than a position."""
        return is_pane_id(self.pane)

    @property
    def shown(self) -> str:
        """The pane as shown to a user: its id (on its host, for a crew of another host), and
        the target it was added with."""
        pane = self.pane if self.host is None else f"{self.host}:{self.pane}"
        return pane if self.label is None else f"{pane} [{self.label}]"

    @classmethod
    def of(cls, name: str, binding: crewlog.Binding, added_at: float) -> Crew:
        pane, label, pid, started, host = binding
        return cls(name, pane, added_at, label if label != pane else None, pid, started, host)

    def binding(self) -> crewlog.Binding:
        return (self.pane, self.label, self.pid, self.started, self.host)


def is_pane_id(target: str) -> bool:
    """``%`` and digits: a tmux pane id, which no other pane of its server ever takes."""
    return target[:1] == "%" and target[1:].isascii() and target[1:].isdigit()


@attrs.frozen
class StatusLine:
    """One line of a status log."""

    text: str
    #: The epoch ``fm crew status`` stamped, or None for a line written some other way.
    at: float | None
    #: Byte offsets of the line (start) and just past its newline (end).
    start: int
    end: int

    @property
    def verb(self) -> str:
        """The lower-cased word before the first colon (``done``, ``needs-decision``), or ""."""
        return crewlog.verb(self.text)

    @property
    def from_captain(self) -> bool:
        """``answered:`` lines are the captain's own replies, not crew events."""
        return crewlog.from_captain(self.text)

    @property
    def oversized(self) -> bool:
        """The line was longer than :data:`~firstmate.fast.crewlog.LINE_MAX` bytes: only its
        beginning was kept."""
        return crewlog.oversized((self.text, self.at, self.start, self.end))


@attrs.frozen
class Span:
    """New complete lines of a log between two offsets of one file (identified by its inode)."""

    inode: int
    start: int
    end: int
    lines: tuple[StatusLine, ...]

    @classmethod
    def of(cls, span: crewlog.Span) -> Span:
        """The value of a :func:`firstmate.fast.crewlog.read_span` result."""
        return cls(span[0], span[1], span[2], tuple(StatusLine(*line) for line in span[3]))


@attrs.frozen
class Cursor:
    inode: int
    offset: int

    def encode(self) -> bytes:
        return crewlog.encode_cursor((self.inode, self.offset))


@attrs.frozen
class Decision:
    crew: str
    key: str
    note: str
    at: float | None
    #: False when the key was derived from the line number (the crew gave none).
    keyed: bool


# --- names and paths ---------------------------------------------------------------------------


def validate_name(name: str) -> str:
    if not NAME_RE.fullmatch(name or ""):
        raise UsageError(
            f"invalid crew name {name!r}: use 1-64 characters from A-Z a-z 0-9 . _ - (not "
            "starting with . or -)"
        )
    return name


def validate_key(key: str) -> str:
    if not KEY_RE.fullmatch(key or ""):
        raise UsageError(f"invalid decision key {key!r}: use 1-64 characters from A-Z a-z 0-9 . _ -")
    return key


def path(home: Home, name: str, suffix: str) -> Path:
    return home.crew_dir / f"{name}{suffix}"


def _crew_dir(home: Home) -> None:
    make_private_dir(home.state)
    make_private_dir(home.crew_dir)


# --- sanitising --------------------------------------------------------------------------------


def clean_text(text: str, max_bytes: int = MAX_STATUS_BYTES) -> str:
    """One printable line, cut to *max_bytes* (:func:`firstmate.fast.crewreport.status_text`)."""
    from firstmate.fast.crewreport import status_text

    return status_text(text, max_bytes)


# --- low-level file access ---------------------------------------------------------------------


def _open_read(p: str | Path) -> int | None:
    """A read-only descriptor for *p*, None when it does not exist; a symlink is refused."""
    return crewlog.open_read(os.fspath(p))


def _append(p: Path, data: bytes) -> int:
    """Append *data* whole or not at all; returns the new size
    (:func:`firstmate.fast.crewreport.append_whole`)."""
    from firstmate.fast.crewreport import append_whole

    return append_whole(str(p), data)


def parse_line(raw: str, start: int, end: int) -> StatusLine:
    return StatusLine(*crewlog.parse_line(raw, start, end))


def read_span(p: Path, start: int = 0, *, inode: int | None = None,
              limit: int | None = None) -> Span | None:
    """Complete lines of *p* from byte *start* (at most *limit* bytes, default all); None when
    *p* is absent (:func:`firstmate.fast.crewlog.read_span`).

    When the file is no longer the one the offset belongs to (another *inode*) or it shrank
    below *start*, reading restarts at 0.
    """
    span = crewlog.read_span(os.fspath(p), start, inode=inode, limit=limit)
    return None if span is None else Span.of(span)


def read_cursor(p: str | Path) -> Cursor | None:
    cursor = crewlog.read_cursor(os.fspath(p))
    return None if cursor is None else Cursor(*cursor)


def parse_cursor(text: str | None) -> Cursor | None:
    """A cursor file's text as a :class:`Cursor`; None when it is not one."""
    cursor = crewlog.parse_cursor(text)
    return None if cursor is None else Cursor(*cursor)


def write_cursor(p: Path, cursor: Cursor) -> None:
    crewlog.write_cursor(os.fspath(p), (cursor.inode, cursor.offset))


def turn_signature(home: Home, name: str) -> tuple[str, float] | None:
    """(signature, mtime) of the crew's turn-end marker, or None when it has none."""
    p = path(home, name, TURN_ENDED)
    refuse_symlink(p)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return None
    return marker_signature(st), st.st_mtime


def marker_signature(st: os.stat_result) -> str:
    """The turn-end marker's signature from its ``lstat``: any append or touch changes it."""
    return crewlog.marker_signature(st)


def read_text(p: str | Path, limit: int = 4096) -> str | None:
    return crewlog.read_text(os.fspath(p), limit)


# --- the registry ------------------------------------------------------------------------------


def _validate_pane(pane: str) -> str:
    if not pane or not pane.strip() or _CONTROL.search(pane) or len(pane) > MAX_PANE_CHARS:
        raise UsageError(f"invalid pane target {pane!r}: give a tmux target such as session:window.pane or %12")
    return pane.strip()


def get(home: Home, name: str) -> Crew:
    """The registered crew *name*; an unknown crew is a :class:`UsageError` naming ``fm crew add``."""
    validate_name(name)
    found = crewlog.read_registration(str(home.crew_dir), name)
    if found is None:
        from firstmate.fast.crewreport import unknown_crew

        raise unknown_crew(str(home.crew_dir), name)
    return Crew.of(name, *found)


def exists(home: Home, name: str) -> bool:
    return os.path.lexists(path(home, name, PANE))


def _registry(home: Home) -> FileLock:
    from firstmate.store.locks import FileLock

    return FileLock(home.lock_path(REGISTRY_LOCK), REGISTRY_LOCK, home.root,
                    timeout=REGISTRY_WAIT)


def _write_registration(home: Home, member: Crew, *, keep_time: float | None = None) -> None:
    target = path(home, member.name, PANE)
    atomic_write(target, crewlog.encode_registration(member.binding()))
    if keep_time is not None:  # (the registration's mtime is when the crew was added)
        os.utime(target, (keep_time, keep_time), follow_symlinks=False)
    _forward(home, member.name)


def _forward(home: Home, name: str) -> None:
    """On a home joined to a fleet, have its forwarder send a registration that changed at
    once: the crew named in the change journal, then the forwarder rung (its periodic full
    pass would find it later); one ``stat`` on any other home."""
    from firstmate.fast.crewreport import JOINED, note_changed

    if os.path.lexists(os.path.join(home.root, JOINED)):
        from firstmate.fast import fleetbell

        note_changed(str(home.root), name)
        fleetbell.ring(str(home.root))


def add(home: Home, name: str, pane: str, *, replace: bool = False, label: str | None = None,
        pid: int | None = None, started: int | None = None, host: str | None = None) -> Crew:
    """Register crew *name* watching *pane* (a pane id, with the *label* it was given as and its
    program's *pid* and *started* time, when known; on fleet host *host*, None: this machine).
    Re-adding with the same pane is a no-op (its program recorded anew); with a different pane
    (or host) it is a :class:`ConflictError` unless *replace* (which keeps the logs). Re-adding
    a crew whose registration still names the position *label* names binds it."""
    validate_name(name)
    pane = _validate_pane(pane)
    label = None if label is None else _validate_pane(label)
    if host is not None and not HOST_RE.fullmatch(host):
        raise UsageError(f"invalid host name {host!r}: use 1-32 characters from A-Z a-z 0-9 _ -")
    wanted = Crew(name, pane, 0.0, label if label != pane else None, pid, started, host)
    _crew_dir(home)
    kept: float | None = None
    with _registry(home):
        if exists(home, name):
            current = get(home, name)
            same = current.host == host and (
                current.pane == pane or (not current.bound and current.pane == label))
            if same and wanted.label is None and current.pane == pane:
                wanted = attrs.evolve(wanted, label=current.label)  # (re-added by its id)
            if same and current.binding() == wanted.binding():
                return current
            if not same and not replace:
                raise ConflictError(
                    f"crew {name!r} is registered with pane {current.shown!r}; pass --replace "
                    f"to point it at {wanted.shown!r}, or run fm crew remove {name} first")
            kept = current.added_at if same else None
        else:
            # A fresh registration starts clean: nothing left behind by an earlier crew of that name.
            _remove_files(home, name, SUFFIXES[1:])
        _write_registration(home, wanted, keep_time=kept)
    return get(home, name)


def bind(home: Home, member: Crew, pane: str, pid: int | None, started: int | None) -> Crew | None:
    """Bind *member*, registered by a position, to the pane id *pane* it names now (and that
    pane's program), keeping the position as its label and its registration time; None when
    the registration changed meanwhile (removed, replaced or bound already): nothing is
    written."""
    if member.bound or not is_pane_id(pane):
        return None
    with _registry(home):
        try:
            current = get(home, member.name)
        except UsageError:
            return None
        if current != member:
            return None
        _write_registration(home, Crew(member.name, pane, 0.0, member.label or member.pane, pid,
                                       started, member.host), keep_time=member.added_at)
    return get(home, member.name)


def remove(home: Home, name: str) -> Crew:
    """Unregister crew *name* and delete its logs, markers and cursors."""
    crew = get(home, name)
    with _registry(home):
        _remove_files(home, name, SUFFIXES)
    _forward(home, name)
    return crew


def unregister(home: Home, name: str) -> Crew:
    """Unregister crew *name* but keep its logs (:data:`LOGS`) until a crew of that name is
    added again; the watcher's cursors for it go."""
    crew = get(home, name)
    with _registry(home):
        _remove_files(home, name, [suffix for suffix in SUFFIXES if suffix not in LOGS])
    _forward(home, name)
    return crew


def set_harness(home: Home, name: str, harness: str) -> None:
    """Record which harness the registered crew *name* runs (``fm crew spawn``)."""
    get(home, name)
    atomic_write(path(home, name, HARNESS), (clean_text(harness, 64) + "\n").encode())


def harness(home: Home, name: str) -> str | None:
    """The harness recorded for crew *name*, or None (a crew registered by hand)."""
    text = read_text(path(home, name, HARNESS), 256)
    return clean_text(text or "", 64) or None  # (written by fm clean, but it is a plain file)


def save_pane_log(home: Home, name: str, text: str) -> Path:
    """Keep *text* (the crew's last screen and scrollback) as ``NAME.pane-log``, its newest
    :data:`MAX_PANE_LOG` bytes."""
    _crew_dir(home)
    data = text.encode("utf-8", "replace")[-MAX_PANE_LOG:]
    target = path(home, name, PANE_LOG)
    atomic_write(target, data)
    return target


def _remove_files(home: Home, name: str, suffixes: Iterable[str]) -> None:
    for suffix in suffixes:
        p = path(home, name, suffix)
        try:
            os.unlink(p)  # unlink never follows a symlink: removing one is safe
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StateError(f"cannot remove {p}: {exc.strerror}; check the state directory's permissions") from exc


def list(home: Home) -> tuple[Crew, ...]:
    """Every registered crew, by name (:func:`firstmate.fast.crewlog.registrations`)."""
    return tuple(Crew.of(*found) for found in crewlog.registrations(str(home.crew_dir)))


list_crews = list


# --- reporting ---------------------------------------------------------------------------------


def append_status(home: Home, name: str, line: str, *, now: float | None = None) -> StatusLine:
    """Append ``<epoch>\t<line>`` to the crew's status log and ring the watcher's doorbell
    (the one implementation, :func:`firstmate.fast.crewreport.status`)."""
    from firstmate.fast import crewreport

    text, at, start, end = crewreport.status(str(home.root), name, line, now=now)
    return StatusLine(text, at, start, end)


def mark_turn_ended(home: Home, name: str, *, now: float | None = None) -> None:
    """Record that the crew's harness ended a turn (a line per turn; ``touch`` works as well)."""
    from firstmate.fast import crewreport

    crewreport.turn_ended(str(home.root), name, now=now)


def _ring(home: Home) -> None:
    from firstmate.store import doorbell

    doorbell.ring(home)


def last_line(home: Home, name: str, *, tail: int = 65536) -> StatusLine | None:
    """The newest line the crew itself reported (the captain's ``answered:`` lines skipped)."""
    p = path(home, name, STATUS)
    fd = _open_read(p)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    span = read_span(p, max(0, size - tail))
    if span is None:
        return None
    # The first line of a tail read may be partial; drop it unless the read began at 0.
    lines = span.lines if span.start == 0 else span.lines[1:]
    for line in reversed(lines):
        if not line.from_captain:
            return line
    if span.start > 0 and tail < (8 << 20):
        return last_line(home, name, tail=tail * 8)
    return None


# --- decisions ---------------------------------------------------------------------------------


def open_decisions(home: Home, name: str) -> builtins.list[Decision]:
    """The crew's open decisions, folded from its whole status log
    (:func:`firstmate.fast.crewlog.fold_decisions`)."""
    span = crewlog.read_span(os.fspath(path(home, name, STATUS)), 0)
    return [] if span is None else [Decision(*found) for found in crewlog.fold_decisions(name, span[3])]


def unseen_decisions(home: Home, name: str) -> builtins.list[Decision]:
    """The crew's open decisions that no drain has presented yet: asked after its presentation
    mark (the drain cursor; :mod:`firstmate.fast.crewview`)."""
    span = crewlog.read_span(os.fspath(path(home, name, STATUS)), 0)
    if span is None:
        return []
    mark = crewlog.read_mark(os.fspath(path(home, name, DRAIN_CURSOR)))
    shown = (mark[0][1] if mark is not None and mark[0][0] == span[0] and mark[0][1] <= span[2]
             else 0)
    return [Decision(name, key, note, line[1], keyed)
            for key, keyed, note, line in crewlog.open_decision_lines(span[3]) if line[2] >= shown]


def answer_line(key: str, text: str) -> str:
    """The line that answers decision *key*: recorded in the crew's log, and what the crew's
    brief says an answer typed into its session starts with."""
    return f"answered: key={key} {clean_text(text)}"


def answer(home: Home, name: str, key: str, text: str, *, now: float | None = None) -> Decision:
    """Close the open decision *key* of crew *name* by recording ``answered: key=K <text>``."""
    get(home, name)
    validate_key(key)
    reply = clean_text(text)
    if not reply:
        raise UsageError(f'empty answer: run fm crew answer {name} --key {key} "<answer>"')
    pending = {decision.key: decision for decision in open_decisions(home, name)}
    decision = pending.get(key)
    if decision is None:
        keys = ", ".join(sorted(pending)) or "none"
        raise UsageError(f"crew {name!r} has no open decision with key {key!r} (open: {keys})")
    append_status(home, name, answer_line(key, reply), now=now)
    return decision
