"""A crew's files as plain values: its registration, its status log and a cursor into it.

The attrs-free rules behind :mod:`firstmate.store.crew` (whose value classes wrap what these
return) and the ``fm wake drain`` fast path (:mod:`firstmate.fast.drainpath`), which imports
this module only when crews are registered. Plain tuples:

``Line``      ``(text, at, start, end)``: one status line, its ``fm crew status`` stamp (None for
              a line written another way) and its byte offsets (start, just past the newline)
``Span``      ``(inode, start, end, lines)``: the complete lines of one file between two offsets
``Cursor``    ``(inode, offset)``
``Decision``  ``(crew, key, note, at, keyed)``; *keyed* is False for a key made from the line
              number
``Mark``      ``(cursor, turn)``: what a drain presented of a crew (``NAME.drain-cursor``): its
              status log up to the cursor and, when it showed lines of the crew, the turn-end
              marker's signature as it was read with them (else None)
``Binding``   ``(pane, label, pid, started, host)``: a registration (below)

A registration (``NAME.pane``) names the crew's pane on its first line: tmux's stable pane id
(``%12``), resolved when the crew was added or spawned, or, in a registration no fm has bound yet
(one written before panes were bound, or whose pane did not exist when it was added), the target
as it was given. Lines after it are ``key value``: ``label TARGET`` (the target the crew was
added with, shown as a label) and ``pid PID [START]`` (the pane's program when it was bound: its
pid and its start time in clock ticks since boot, from ``/proc/PID/stat``). A ``pid`` line that
does not parse reads as pid 0, which no pane has: such a registration never verifies. A crew of
another host of the home's fleet has a ``host H`` line: its pane, program and start time are
on host H (docs/fleet-remote.md). A registration written before that line existed names such
a pane ``fleet://H/<pane>`` on its first line, and still reads as pane ``<pane>`` of host H.

Every file is opened without following a symlink and without blocking, and must be a regular
file: a symlink, a FIFO, a directory or an unreadable file is a
:class:`~firstmate.base.errors.StateError` naming the path (never a read that hangs).

The line rules are regular expressions (below), but a drain reads every line of every log, and
importing :mod:`re` costs the fast path a third of its budget: text they cannot mistake (no
character that re's IGNORECASE folds onto an ASCII letter, an ASCII stamp) is judged by hand,
with the same answers, and only other text compiles them.
"""

from __future__ import annotations

import errno
import os
import stat

from firstmate.base.safepaths import atomic_write, refuse_symlink, state_error
from firstmate.fast.crewreport import PANE, STATUS, TURN_ENDED, valid_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from collections.abc import Iterable

    Line = tuple[str, float | None, int, int]
    Span = tuple[int, int, int, tuple[Line, ...]]
    Cursor = tuple[int, int]
    Decision = tuple[str, str, str, float | None, bool]
    Mark = tuple[Cursor, str | None]
    Binding = tuple[str, str | None, int | None, int | None, str | None]

DRAIN_CURSOR = ".drain-cursor"
#: How a registration written before the ``host`` line named a remote crew's pane:
#: ``fleet://<host>/<pane on that host>``.
REMOTE_PREFIX = "fleet://"
MAX_PANE_CHARS = 256
#: Most bytes of a registration read (a target and a label of MAX_PANE_CHARS each, and a pid).
MAX_REGISTRATION_BYTES = 2048
#: Longest status line read whole (bytes, line end excluded): a longer one (``fm crew status``
#: writes at most ~2 KB; this is a broken reporter, or ``cat`` of a binary) is kept as its first
#: LINE_MAX bytes, and readers move past it (:func:`oversized` tells them it was cut).
LINE_MAX = 1 << 16
#: Bytes read at a time while looking for the end of a line longer than a read's limit.
_SCAN_CHUNK = 1 << 20

#: A stamped line (DOTALL): ``<epoch>\t<text>``.
LINE_RE = r"(\d{1,12}(?:\.\d{1,9})?)\t(.*)"
#: A line's verb: the word before its first colon.
VERB_RE = r"\s*([A-Za-z][A-Za-z0-9_-]*):"
#: A decision opened, and one answered (IGNORECASE, DOTALL).
DECISION_RE = (r"\s*needs-decision:\s*(?:\[key=([A-Za-z0-9._-]{1,64})\]"
               r"|key=([A-Za-z0-9._-]{1,64})(?=\s|$))?\s*(.*)")
ANSWER_RE = (r"\s*answered:\s*(?:\[key=([A-Za-z0-9._-]{1,64})\]"
             r"|key=([A-Za-z0-9._-]{1,64})(?=\s|$))\s*(.*)")
#: The characters outside ASCII that IGNORECASE matches to an ASCII letter, and the only ones
#: whose lower case holds one (İ ı ſ K): text without them is judged by hand.
FOLDS = frozenset("\u0130\u0131\u017f\u212a")
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_VERB_CHARS = _LETTERS | frozenset("0123456789_-")
_KEY_CHARS = _LETTERS | frozenset("0123456789._-")
KEY_MAX = 64

_compiled: tuple[re.Pattern[str], ...] = ()


def _patterns() -> tuple[re.Pattern[str], ...]:
    """``(line, decision, answer)``, compiled on first need."""
    global _compiled
    if not _compiled:
        import re

        _compiled = (re.compile(LINE_RE, re.DOTALL),
                     re.compile(DECISION_RE, re.IGNORECASE | re.DOTALL),
                     re.compile(ANSWER_RE, re.IGNORECASE | re.DOTALL))
    return _compiled


def _foldless(text: str) -> bool:
    return text.isascii() or FOLDS.isdisjoint(text)


def crew_path(crew_dir: str, name: str, suffix: str) -> str:
    return os.path.join(crew_dir, name + suffix)


# --- reading files -----------------------------------------------------------------------------


def open_read(path: str) -> int | None:
    """A read-only descriptor for the regular file *path*, None when it does not exist.
    Opened without blocking, so a FIFO is refused rather than waited on."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise state_error(
                f"refusing symlinked state path {path}: remove the link and let fm recreate it"
            ) from exc
        raise state_error(f"cannot read {path}: {exc.strerror}; check the state directory's "
                          "permissions") from exc
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        raise state_error(f"{path} is not a regular file; move it aside and retry")
    return fd


def read_fd(fd: int, start: int, limit: int) -> bytes:
    """Up to *limit* bytes of *fd* from *start*."""
    chunks: list[bytes] = []
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


def read_text(path: str, limit: int = 4096) -> str | None:
    """The first *limit* bytes of *path* as text (None: absent)."""
    fd = open_read(path)
    if fd is None:
        return None
    try:
        return os.read(fd, limit).decode("utf-8", "replace")
    finally:
        os.close(fd)


# --- status logs -------------------------------------------------------------------------------


def parse_line(raw: str, start: int, end: int) -> Line:
    """One status line's text: ``<epoch>\\t<text>`` as ``fm crew status`` stamps it, else the
    whole text unstamped (:data:`LINE_RE`)."""
    stamp, tab, text = raw.partition("\t")
    if not tab:
        return raw, None, start, end
    if stamp.isascii():  # (\d also takes other scripts' digits: those go to the pattern)
        whole, dot, part = stamp.partition(".")
        if (0 < len(whole) <= 12 and whole.isdigit()
                and (not dot or (0 < len(part) <= 9 and part.isdigit()))):
            return text, float(stamp), start, end
        return raw, None, start, end
    match = _patterns()[0].fullmatch(raw)
    if match:
        return match.group(2), float(match.group(1)), start, end
    return raw, None, start, end


def read_span(path: str, start: int = 0, *, inode: int | None = None,
              limit: int | None = None) -> Span | None:
    """Complete lines of *path* from byte *start* (at most *limit* bytes, default all; blank
    lines skipped); None when *path* is absent.

    When the file is no longer the one the offset belongs to (another *inode*) or it shrank
    below *start*, reading restarts at 0. A line longer than :data:`LINE_MAX` is kept as its
    first LINE_MAX bytes (:func:`oversized`). One longer than *limit* is read past all the same
    (to its newline, keeping nothing more), counting LINE_MAX against the limit, and the lines
    after it are read on: a reader's cursor never stops in front of a line too long to read.
    """
    fd = open_read(path)
    if fd is None:
        return None
    lines: list[Line] = []
    try:
        st = os.fstat(fd)
        size = st.st_size
        if (inode is not None and inode != st.st_ino) or start > size:
            start = 0
        offset = start
        budget = size - start if limit is None else limit
        while offset < size and budget > 0:
            want = min(budget, size - offset)
            data = read_fd(fd, offset, want)
            complete = data.rfind(b"\n") + 1
            if complete:
                offset = _parse(data[:complete], offset, None, lines)
                break  # (an incomplete tail, or the rest past the limit, is the next read's)
            past = (_line_end(fd, offset + len(data), size)
                    if len(data) == want < size - offset else None)
            if past is None:
                break  # a line still being written
            offset = _parse(data, offset, past, lines)
            budget -= LINE_MAX
    finally:
        os.close(fd)
    return st.st_ino, start, offset, tuple(lines)


def _parse(blob: bytes, offset: int, past: int | None, lines: list[Line]) -> int:
    """Append the lines of *blob* (read from byte *offset*) to *lines*; where they end. With
    *past*, *blob*'s last piece is the beginning of a line that runs on to *past*."""
    for raw in blob.splitlines(keepends=True):
        end = offset + len(raw)
        text = raw.rstrip(b"\r\n")
        if len(text) > LINE_MAX:
            text = text[:LINE_MAX]
        line = text.decode("utf-8", "replace")
        if line.strip():
            lines.append(parse_line(line, offset, end))
        offset = end
    if past is None:
        return offset
    if lines and lines[-1][3] == offset:
        last, at, begin, _ = lines[-1]
        lines[-1] = (last, at, begin, past)
    return past


def _line_end(fd: int, offset: int, size: int) -> int | None:
    """Just past the first newline of *fd* at or after *offset* (before *size*), or None when
    the line is not complete yet."""
    while offset < size:
        chunk = os.pread(fd, min(_SCAN_CHUNK, size - offset), offset)
        if not chunk:
            return None
        found = chunk.find(b"\n")
        if found >= 0:
            return offset + found + 1
        offset += len(chunk)
    return None


def oversized(line: Line) -> bool:
    """*line* was longer than :data:`LINE_MAX` and holds only its beginning."""
    return line[3] - line[2] > LINE_MAX + 1


def verb(text: str) -> str:
    """The lower-cased word before the first colon (``done``, ``needs-decision``), or ""
    (:data:`VERB_RE`, which folds no case: judged by hand)."""
    # \s is what str.isspace() (and so lstrip) takes; the word's characters exclude ':'.
    rest = text.lstrip()
    colon = rest.find(":")
    word = rest[:colon]
    if colon > 0 and word[0] in _LETTERS and _VERB_CHARS.issuperset(word):
        return word.lower()
    return ""


def from_captain(text: str) -> bool:
    """``answered:`` lines are the captain's own replies, not crew events."""
    return verb(text) == "answered"


def _keyed(rest: str) -> tuple[str, str] | None:
    """*rest* opens with ``[key=K]``, or ``key=K`` before whitespace or the end (any case; K: 1-64
    of A-Z a-z 0-9 . _ -): ``(K, what follows)``. Foldless text only."""
    for opening, closing in (("[key=", "]"), ("key=", "")):
        if rest[:len(opening)].lower() != opening:
            continue
        start = end = len(opening)
        while end < len(rest) and end - start <= KEY_MAX and rest[end] in _KEY_CHARS:
            end += 1
        if not 0 < end - start <= KEY_MAX:
            continue
        after = rest[end:end + 1]
        if (after == closing) if closing else (not after or after.isspace()):
            return rest[start:end], rest[end + len(closing):]
    return None


def decision(text: str) -> tuple[str | None, str] | None:
    """A ``needs-decision:`` line's ``(key or None, note)``, else None (:data:`DECISION_RE`)."""
    if not _foldless(text):
        match = _patterns()[1].fullmatch(text)
        return None if match is None else (match.group(1) or match.group(2), match.group(3).strip())
    rest = text.lstrip()
    if rest[:15].lower() != "needs-decision:":
        return None
    rest = rest[15:].lstrip()
    keyed = _keyed(rest)
    return (None, rest.strip()) if keyed is None else (keyed[0], keyed[1].strip())


def answered(text: str) -> str | None:
    """The key an ``answered:`` line closes, else None (:data:`ANSWER_RE`)."""
    if not _foldless(text):
        match = _patterns()[2].fullmatch(text)
        return None if match is None else (match.group(1) or match.group(2))
    rest = text.lstrip()
    if rest[:9].lower() != "answered:":
        return None
    keyed = _keyed(rest[9:].lstrip())
    return None if keyed is None else keyed[0]


def open_decision_lines(lines: Iterable[Line]) -> list[tuple[str, bool, str, Line]]:
    """The decisions still open after reading *lines* (a whole log, oldest first), in order:
    ``(key, keyed, note, the line that asked it)``."""
    open_: dict[str, tuple[str, bool, str, Line]] = {}
    for number, line in enumerate(lines, start=1):
        asked = decision(line[0])
        if asked is not None:
            given, note = asked
            key = given or f"line{number}"
            open_.pop(key, None)  # a re-asked decision moves to the end with its newest wording
            open_[key] = (key, given is not None, note, line)
            continue
        closed = answered(line[0])
        if closed is not None:
            open_.pop(closed, None)
    return list(open_.values())


def fold_decisions(crew: str, lines: Iterable[Line]) -> list[Decision]:
    """The decisions still open after reading *lines* (a whole log, oldest first) in order."""
    return [(crew, key, note, line[1], keyed)
            for key, keyed, note, line in open_decision_lines(lines)]


def closed_decisions(lines: Iterable[Line]) -> set[int]:
    """Where the ``needs-decision:`` lines of *lines* (a whole log, oldest first) that an
    ``answered:`` line after them closed start (a decision asked again under its key, then
    answered, closes every asking)."""
    asked: dict[str, list[int]] = {}
    closed: set[int] = set()
    for number, line in enumerate(lines, start=1):
        found = decision(line[0])
        if found is not None:
            asked.setdefault(found[0] or f"line{number}", []).append(line[2])
            continue
        key = answered(line[0])
        if key is not None:
            closed.update(asked.pop(key, ()))
    return closed


def cut(text: str, max_bytes: int) -> str:
    """*text* cut to at most *max_bytes* of UTF-8, marking a cut with ``...``."""
    data = text.encode("utf-8", "replace")
    if len(data) <= max_bytes:
        return text
    return data[: max(0, max_bytes - 3)].decode("utf-8", "ignore") + "..."


# --- cursors -----------------------------------------------------------------------------------


def parse_cursor(text: str | None) -> Cursor | None:
    """A cursor file's text (``<inode> <offset>``, a drain cursor's turn-end signature after
    it) as a cursor; None when it is not one."""
    raw = (text or "").split()
    if len(raw) in (2, 5) and all(part.isascii() and part.isdigit() for part in raw):
        return int(raw[0]), int(raw[1])
    return None


def parse_mark(text: str | None) -> Mark | None:
    """A drain cursor's text as a presentation mark: the cursor, and the signature of the
    turn-end marker its lines were shown with (None: none covered)."""
    cursor = parse_cursor(text)
    if cursor is None:
        return None
    return cursor, " ".join((text or "").split()[2:]) or None


def read_mark(path: str) -> Mark | None:
    """The presentation mark kept in the drain cursor at *path* (None: none, or not one)."""
    return parse_mark(_cursor_text(path))


def write_mark(path: str, mark: Mark) -> None:
    """Replace the drain cursor at *path* atomically (and durably)."""
    (inode, offset), turn = mark
    atomic_write(path, f"{inode} {offset}{' ' + turn if turn else ''}\n".encode())


def marker_signature(st: os.stat_result) -> str:
    """The turn-end marker's signature from its ``lstat``: any append or touch changes it."""
    return f"{st.st_ino} {st.st_size} {st.st_mtime_ns}"


def turn_signature(path: str) -> str | None:
    """The signature of the turn-end marker at *path* (None: there is none, or it is a
    symlink, which no reader follows)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise state_error(f"cannot read {path}: {exc.strerror}; check the state directory's "
                          "permissions") from exc
    return None if stat.S_ISLNK(st.st_mode) else marker_signature(st)


def read_cursor(path: str) -> Cursor | None:
    return parse_cursor(_cursor_text(path))


def _cursor_text(path: str) -> str | None:
    """The first 256 bytes of the cursor file at *path* (None: absent)."""
    fd = open_read(path)
    if fd is None:
        return None
    try:
        return os.read(fd, 256).decode("ascii", "replace")
    finally:
        os.close(fd)


def encode_cursor(cursor: Cursor) -> bytes:
    return f"{cursor[0]} {cursor[1]}\n".encode()


def write_cursor(path: str, cursor: Cursor) -> None:
    """Replace the cursor file at *path* atomically (and durably)."""
    atomic_write(path, encode_cursor(cursor))


# --- the registry ------------------------------------------------------------------------------


def _number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else None


def parse_registration(text: str) -> Binding:
    """A registration's text as ``(pane, label, pid, started, host)`` (see the module
    docstring)."""
    lines = text.split("\n")
    pane = lines[0].strip()
    label: str | None = None
    pid: int | None = None
    started: int | None = None
    host: str | None = None
    if pane.startswith(REMOTE_PREFIX):
        host, _, pane = pane[len(REMOTE_PREFIX):].partition("/")
        pane = pane.strip() or "-"
    for line in lines[1:]:
        key, _, value = line.strip().partition(" ")
        if key == "label" and value.strip():
            label = value.strip()
        elif key == "host" and value.strip():
            host = value.strip()
        elif key == "pid":
            words = value.split()
            pid = _number(words[0]) if words else None
            started = _number(words[1]) if len(words) > 1 else None
            if pid is None:
                pid, started = 0, None
    return pane, label, pid, started, host or None


def encode_registration(binding: Binding) -> bytes:
    """The text :func:`parse_registration` reads back as *binding*."""
    pane, label, pid, started, host = binding
    lines = [pane]
    if host is not None:
        lines.append(f"host {host}")
    if label is not None and label != pane:
        lines.append(f"label {label}")
    if pid is not None:
        lines.append(f"pid {pid}" + ("" if started is None else f" {started}"))
    return ("\n".join(lines) + "\n").encode()


def read_registration(crew_dir: str, name: str) -> tuple[Binding, float] | None:
    """``(binding, registered at)`` of crew *name* (a valid name), None when it is not
    registered; a symlinked registration is refused."""
    path = crew_path(crew_dir, name, PANE)
    refuse_symlink(path)
    fd = open_read(path)
    if fd is None:
        return None
    try:
        text = os.read(fd, MAX_REGISTRATION_BYTES).decode("utf-8", "replace")
        added = os.fstat(fd).st_mtime
    finally:
        os.close(fd)
    return parse_registration(text), added


def registration(crew_dir: str, name: str) -> tuple[str, float] | None:
    """``(pane, registered at)`` of crew *name* (:func:`read_registration`)."""
    found = read_registration(crew_dir, name)
    return None if found is None else (found[0][0], found[1])


def registrations(crew_dir: str) -> list[tuple[str, Binding, float]]:
    """Every registered crew as ``(name, binding, registered at)``, by name. A ``.pane`` entry
    whose name is not a crew's, or that vanished while listed, is skipped."""
    try:
        entries = os.listdir(crew_dir)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise state_error(f"cannot list {crew_dir}: {exc.strerror}") from exc
    crews: list[tuple[str, Binding, float]] = []
    for entry in sorted(entries):
        if not entry.endswith(PANE):
            continue
        name = entry[: -len(PANE)]
        found = read_registration(crew_dir, name) if valid_name(name) else None
        if found is None:
            continue  # not a crew's name, or removed while we listed
        crews.append((name, *found))
    return crews


def registered(crew_dir: str) -> list[tuple[str, str, float]]:
    """Every registered crew as ``(name, pane, registered at)`` (:func:`registrations`)."""
    return [(name, binding[0], added) for name, binding, added in registrations(crew_dir)]


__all__ = ["ANSWER_RE", "DECISION_RE", "DRAIN_CURSOR", "FOLDS", "LINE_MAX", "LINE_RE",
           "MAX_PANE_CHARS", "MAX_REGISTRATION_BYTES", "PANE", "REMOTE_PREFIX", "STATUS",
           "TURN_ENDED", "VERB_RE",
           "answered", "closed_decisions", "crew_path", "cut", "decision", "encode_cursor",
           "encode_registration", "fold_decisions", "from_captain", "marker_signature",
           "open_decision_lines", "open_read", "oversized", "parse_cursor", "parse_line",
           "parse_mark", "parse_registration", "read_cursor", "read_fd", "read_mark",
           "read_registration", "read_span", "read_text", "registered", "registration",
           "registrations", "turn_signature", "verb", "write_cursor", "write_mark"]
