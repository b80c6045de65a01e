"""The crew registry and the crews' status logs, kept as plain files in ``state/crew/``.

Files rather than the database, because crews and their harness hooks report from shells (a
status line is one ``O_APPEND`` write; a turn end may be a bare ``touch``). Per crew NAME:

``NAME.pane``           the registration: the backend target of the crew's pane (one line)
``NAME.status``         the status log: ``<epoch>\\t<line>`` per report, append-only
``NAME.turn-ended``     the turn-end marker: one ``<epoch>`` line appended (or touched) per turn end
``NAME.signal-cursor``  the watcher's status-source cursor (``<inode> <offset>``)
``NAME.turn-seen``      the watcher's last seen turn-end signature
``NAME.drain-cursor``   the drain presentation's cursor (``<inode> <offset>``)
``NAME.pane-state``     the stale source's pane hash record
``NAME.harness``        the harness ``fm crew spawn`` started the crew with (one line)
``NAME.pane-log``       the crew's last screen and scrollback, saved by ``fm crew stop``

No suffix ends with another, so two crew names can never share a file. Every file is 0600 and
is opened without following symlinks.

Decisions: a ``needs-decision:`` line opens a decision, keyed by ``key=K`` (or ``[key=K]``) right
after the verb, else by its line number (``line<N>``). It stays open until an
``answered: key=K <answer>`` line, written by :func:`answer` (``fm crew answer``), closes it.
"""

from __future__ import annotations

import builtins
import errno
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

import attrs

from firstmate.base.crewreport import MAX_STATUS_BYTES
from firstmate.base.errors import ConflictError, StateError, UsageError
from firstmate.store.home import Home, atomic_write, make_private_dir, refuse_symlink

NAME_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
KEY_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
MAX_PANE_CHARS = 256

PANE = ".pane"
STATUS = ".status"
TURN_ENDED = ".turn-ended"
SIGNAL_CURSOR = ".signal-cursor"
TURN_SEEN = ".turn-seen"
DRAIN_CURSOR = ".drain-cursor"
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


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_LINE = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)\t(.*)", re.DOTALL)
_VERB = re.compile(r"\s*([A-Za-z][A-Za-z0-9_-]*):")
_DECISION = re.compile(
    r"\s*needs-decision:\s*(?:\[key=([A-Za-z0-9._-]{1,64})\]|key=([A-Za-z0-9._-]{1,64})(?=\s|$))?\s*(.*)",
    re.IGNORECASE | re.DOTALL,
)
_ANSWER = re.compile(
    r"\s*answered:\s*(?:\[key=([A-Za-z0-9._-]{1,64})\]|key=([A-Za-z0-9._-]{1,64})(?=\s|$))\s*(.*)",
    re.IGNORECASE | re.DOTALL,
)


@attrs.frozen
class Crew:
    name: str
    pane: str
    #: When the crew was registered (epoch seconds).
    added_at: float


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
        match = _VERB.match(self.text)
        return match.group(1).lower() if match else ""

    @property
    def from_captain(self) -> bool:
        """``answered:`` lines are the captain's own replies, not crew events."""
        return self.verb == "answered"


@attrs.frozen
class Span:
    """New complete lines of a log between two offsets of one file (identified by its inode)."""

    inode: int
    start: int
    end: int
    lines: tuple[StatusLine, ...]


@attrs.frozen
class Cursor:
    inode: int
    offset: int

    def encode(self) -> bytes:
        return f"{self.inode} {self.offset}\n".encode()


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
            f"invalid crew name {name!r}: use 1-64 characters from A-Z a-z 0-9 . _ - (not starting with .)"
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
    """One printable line, cut to *max_bytes* (:func:`firstmate.base.crewreport.status_text`)."""
    from firstmate.base.crewreport import status_text

    return status_text(text, max_bytes)


def cut(text: str, max_bytes: int) -> str:
    """*text* cut to at most *max_bytes* of UTF-8, marking a cut with ``...``."""
    data = text.encode("utf-8", "replace")
    if len(data) <= max_bytes:
        return text
    return data[: max(0, max_bytes - 3)].decode("utf-8", "ignore") + "..."


# --- low-level file access ---------------------------------------------------------------------


def _open_read(p: str | Path) -> int | None:
    """A read-only descriptor for *p*, None when it does not exist; a symlink is refused."""
    try:
        return os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateError(
                f"refusing symlinked state path {p}: remove the link and let fm recreate it"
            ) from exc
        raise StateError(f"cannot read {p}: {exc.strerror}; check the state directory's permissions") from exc


def _read_fd(fd: int, start: int, limit: int) -> bytes:
    chunks: builtins.list[bytes] = []
    remaining = limit
    offset = start
    while remaining > 0:
        chunk = os.pread(fd, min(remaining, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _append(p: Path, data: bytes) -> int:
    """Append *data* whole or not at all; returns the new size
    (:func:`firstmate.base.crewreport.append_whole`)."""
    from firstmate.base.crewreport import append_whole

    return append_whole(str(p), data)


def parse_line(raw: str, start: int, end: int) -> StatusLine:
    match = _LINE.fullmatch(raw)
    if match:
        return StatusLine(match.group(2), float(match.group(1)), start, end)
    return StatusLine(raw, None, start, end)


def read_span(p: Path, start: int = 0, *, inode: int | None = None,
              limit: int | None = None) -> Span | None:
    """Complete lines of *p* from byte *start* (at most *limit* bytes, default all); None when
    *p* is absent.

    When the file is no longer the one the offset belongs to (another *inode*) or it shrank
    below *start*, reading restarts at 0.
    """
    fd = _open_read(p)
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateError(f"{p} is not a regular file; move it aside and retry")
        if (inode is not None and inode != st.st_ino) or start > st.st_size:
            start = 0
        size = st.st_size - start
        data = _read_fd(fd, start, size if limit is None else min(limit, size))
    finally:
        os.close(fd)
    complete = data.rfind(b"\n") + 1
    lines: builtins.list[StatusLine] = []
    offset = start
    for raw in data[:complete].splitlines(keepends=True):
        end = offset + len(raw)
        text = raw.rstrip(b"\r\n").decode("utf-8", "replace")
        if text.strip():
            lines.append(parse_line(text, offset, end))
        offset = end
    return Span(st.st_ino, start, start + complete, tuple(lines))


def read_cursor(p: str | Path) -> Cursor | None:
    fd = _open_read(p)
    if fd is None:
        return None
    try:
        return parse_cursor(os.read(fd, 256).decode("ascii", "replace"))
    finally:
        os.close(fd)


def parse_cursor(text: str | None) -> Cursor | None:
    """A cursor file's text as a :class:`Cursor`; None when it is not one."""
    raw = (text or "").split()
    if len(raw) == 2 and all(part.isascii() and part.isdigit() for part in raw):
        return Cursor(int(raw[0]), int(raw[1]))
    return None


def write_cursor(p: Path, cursor: Cursor) -> None:
    atomic_write(p, cursor.encode())


def unread(home: Home, name: str, cursor_suffix: str, *, limit: int | None = None) -> Span | None:
    """The status lines of crew *name* after the cursor kept in ``NAME<cursor_suffix>``."""
    cursor = read_cursor(path(home, name, cursor_suffix))
    if cursor is None:
        return read_span(path(home, name, STATUS), 0, limit=limit)
    return read_span(path(home, name, STATUS), cursor.offset, inode=cursor.inode, limit=limit)


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
    return f"{st.st_ino} {st.st_size} {st.st_mtime_ns}"


def read_text(p: str | Path, limit: int = 4096) -> str | None:
    fd = _open_read(p)
    if fd is None:
        return None
    try:
        return os.read(fd, limit).decode("utf-8", "replace")
    finally:
        os.close(fd)


# --- the registry ------------------------------------------------------------------------------


def _validate_pane(pane: str) -> str:
    if not pane or not pane.strip() or _CONTROL.search(pane) or len(pane) > MAX_PANE_CHARS:
        raise UsageError(f"invalid pane target {pane!r}: give a tmux target such as session:window.pane or %12")
    return pane.strip()


def get(home: Home, name: str) -> Crew:
    """The registered crew *name*; an unknown crew is a :class:`UsageError` naming ``fm crew add``."""
    validate_name(name)
    p = path(home, name, PANE)
    refuse_symlink(p)
    fd = _open_read(p)
    if fd is None:
        raise UsageError(f"unknown crew {name!r}; register it first with: fm crew add {name} --pane TARGET")
    try:
        pane = os.read(fd, MAX_PANE_CHARS + 2).decode("utf-8", "replace").strip()
        added = os.fstat(fd).st_mtime
    finally:
        os.close(fd)
    return Crew(name, pane, added)


def exists(home: Home, name: str) -> bool:
    return os.path.lexists(path(home, name, PANE))


def add(home: Home, name: str, pane: str, *, replace: bool = False) -> Crew:
    """Register crew *name* watching *pane*. Re-adding with the same pane is a no-op; with a
    different pane it is a :class:`ConflictError` unless *replace* (which keeps the logs)."""
    validate_name(name)
    pane = _validate_pane(pane)
    _crew_dir(home)
    if exists(home, name):
        current = get(home, name)
        if current.pane == pane:
            return current
        if not replace:
            raise ConflictError(
                f"crew {name!r} is registered with pane {current.pane!r}; "
                f"pass --replace to point it at {pane!r}, or run fm crew remove {name} first"
            )
    else:
        # A fresh registration starts clean: nothing left behind by an earlier crew of that name.
        _remove_files(home, name, SUFFIXES[1:])
    atomic_write(path(home, name, PANE), (pane + "\n").encode())
    return get(home, name)


def remove(home: Home, name: str) -> Crew:
    """Unregister crew *name* and delete its logs, markers and cursors."""
    crew = get(home, name)
    _remove_files(home, name, SUFFIXES)
    return crew


def unregister(home: Home, name: str) -> Crew:
    """Unregister crew *name* but keep its logs (:data:`LOGS`) until a crew of that name is
    added again; the watcher's cursors for it go."""
    crew = get(home, name)
    _remove_files(home, name, [suffix for suffix in SUFFIXES if suffix not in LOGS])
    return crew


def set_harness(home: Home, name: str, harness: str) -> None:
    """Record which harness the registered crew *name* runs (``fm crew spawn``)."""
    get(home, name)
    atomic_write(path(home, name, HARNESS), (clean_text(harness, 64) + "\n").encode())


def harness(home: Home, name: str) -> str | None:
    """The harness recorded for crew *name*, or None (a crew registered by hand)."""
    text = read_text(path(home, name, HARNESS), 256)
    return (text or "").strip() or None


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
    """Every registered crew, by name."""
    try:
        entries = os.listdir(home.crew_dir)
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise StateError(f"cannot list {home.crew_dir}: {exc.strerror}") from exc
    crews: builtins.list[Crew] = []
    for entry in sorted(entries):
        if not entry.endswith(PANE):
            continue
        name = entry[: -len(PANE)]
        if not NAME_RE.fullmatch(name):
            continue
        try:
            crews.append(get(home, name))
        except UsageError:
            continue  # removed while we listed
    return tuple(crews)


list_crews = list


# --- reporting ---------------------------------------------------------------------------------


def append_status(home: Home, name: str, line: str, *, now: float | None = None) -> StatusLine:
    """Append ``<epoch>\t<line>`` to the crew's status log and ring the watcher's doorbell
    (the one implementation, :func:`firstmate.base.crewreport.status`)."""
    from firstmate.base import crewreport

    text, at, start, end = crewreport.status(str(home.root), name, line, now=now)
    return StatusLine(text, at, start, end)


def mark_turn_ended(home: Home, name: str, *, now: float | None = None) -> None:
    """Record that the crew's harness ended a turn (a line per turn; ``touch`` works as well)."""
    from firstmate.base import crewreport

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


def fold_decisions(crew: str, lines: Iterable[StatusLine]) -> builtins.list[Decision]:
    """The decisions still open after reading *lines* (a whole log, oldest first) in order."""
    open_: dict[str, Decision] = {}
    for number, line in enumerate(lines, start=1):
        decision = _DECISION.fullmatch(line.text)
        if decision:
            given = decision.group(1) or decision.group(2)
            key = given or f"line{number}"
            open_.pop(key, None)  # a re-asked decision moves to the end with its newest wording
            open_[key] = Decision(crew, key, decision.group(3).strip(), line.at, given is not None)
            continue
        answer_ = _ANSWER.fullmatch(line.text)
        if answer_:
            open_.pop(answer_.group(1) or answer_.group(2), None)
    return builtins.list(open_.values())


def open_decisions(home: Home, name: str) -> builtins.list[Decision]:
    """The crew's open decisions, folded from its whole status log."""
    span = read_span(path(home, name, STATUS), 0)
    return [] if span is None else fold_decisions(name, span.lines)


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
    append_status(home, name, f"answered: key={key} {reply}", now=now)
    return decision
