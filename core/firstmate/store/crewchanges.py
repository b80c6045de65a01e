"""The crews' change journal, read by one reader from its own record: a look costs what changed.

Every writer of a crew's status log or turn-end marker through fm (``fm crew status``,
``fm crew turn-ended``, the fleet relay) and, on a home joined to a fleet, of its registration
appends the crew's name to the change journal ``state/crew/.changes`` before it rings
(:func:`firstmate.fast.crewreport.note_changed`). Each reader keeps its own record of where it
read the journal to, the crews it left with something pending, and when it last looked over the
whole fleet: the watcher's status source in ``state/crew/.changes-seen``
(:mod:`firstmate.watch.sources.changes` says when it looks at every crew), a joined home's
forwarder in ``state/fleet/out/.changes-seen`` (:mod:`firstmate.fleet.changed`). A look then
covers those crews and the ones named since, which is what it would find new by looking at all
of them, since a crew gains something new only by a write:

- a write through fm is in the journal after the position read (the position is taken before
  the crews are looked at, so a name written during the look is read again next time);
- a write by hand (``echo >>``, ``touch`` of a marker, a mark rewritten) is not: each reader's
  periodic full pass finds it.

The record is a hint, never a truth: a record that is missing, unreadable, of another journal
(the journal was removed or replaced) or behind a journal too long to read means a full pass,
and an older record than the newest (a crash before a rename) only names more crews. A full pass
starts a new journal once the old one is past :data:`ROTATE_BYTES`: it is moved aside before the
pass looks, so a writer that appended to it wrote its line before the pass read the crew, and the
other reader, whose record names the old journal's inode, makes its next look a full pass.
"""

from __future__ import annotations

import contextlib
import os

import attrs

from firstmate.base.errors import FirstmateError
from firstmate.fast.crewreport import CHANGES
from firstmate.store.home import Home, atomic_write

#: The record of what the watcher's status source read (beside the journal).
SEEN = CHANGES + "-seen"
#: What a rotated journal is renamed with (``state/crew/.changes-old``).
OLD = "-old"
#: A journal past this size is started anew at the next full pass.
ROTATE_BYTES = 1 << 18
#: Most journal bytes read by one look; more means a full pass.
READ_MAX = 1 << 22
_FORMAT = "changes-seen 1"


@attrs.frozen
class Seen:
    """Where the journal was read to, the crews left pending there, and the last full pass."""

    inode: int
    offset: int
    pending: frozenset[str]
    full_at: float


@attrs.define(eq=False)
class Changes:
    """The change journal of one home, as one reader reads it (its record at *record*: the
    watcher's status source's by default)."""

    home: Home
    record: str = ""
    journal: str = attrs.field(init=False)
    _written: Seen | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        crew_dir = str(self.home.crew_dir)
        self.journal = os.path.join(crew_dir, CHANGES)
        self.record = self.record or os.path.join(crew_dir, SEEN)

    def load(self) -> Seen | None:
        """The last record, or None when there is none this reader can trust."""
        try:
            fd = os.open(self.record, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            data = os.read(fd, READ_MAX)
        except OSError:
            return None
        finally:
            os.close(fd)
        lines = data.decode("utf-8", "replace").split("\n")
        head = lines[0].split(" ")
        if len(head) != 5 or " ".join(head[:2]) != _FORMAT or lines[-1] != "":
            return None
        try:
            seen = Seen(int(head[2]), int(head[3]), frozenset(n for n in lines[1:-1] if n),
                        float(head[4]))
        except ValueError:
            return None
        return seen if seen.inode >= 0 and seen.offset >= 0 else None

    def position(self) -> tuple[int, int]:
        """The journal's (inode, size) now; (0, 0) when there is none."""
        try:
            st = os.lstat(self.journal)
        except OSError:
            return (0, 0)
        return (st.st_ino, st.st_size)

    def rotate(self) -> None:
        """Start a new journal when this one is long (called before a full pass looks). The old
        one is kept as :data:`OLD` until the next rotation: while it exists, the new journal
        cannot get its inode, so another reader's record of it never reads as the new one's."""
        if self.position()[1] > ROTATE_BYTES:
            with contextlib.suppress(OSError):
                os.replace(self.journal, self.journal + OLD)

    def since(self, seen: Seen) -> tuple[set[str], tuple[int, int]] | None:
        """The names written after *seen*'s position and the position read to; None when the
        journal is not the one *seen* read (or too much to read): look at every crew."""
        try:
            fd = os.open(self.journal, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return (set(), (0, 0)) if seen.inode == 0 else None
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            start = seen.offset if st.st_ino == seen.inode else 0 if seen.inode == 0 else -1
            if start < 0 or start > st.st_size or st.st_size - start > READ_MAX:
                return None
            data = os.pread(fd, st.st_size - start, start) if st.st_size > start else b""
        except OSError:
            return None
        finally:
            os.close(fd)
        end = data.rfind(b"\n") + 1  # (a name being written is read whole next time)
        names = set(data[:end].decode("utf-8", "replace").split("\n"))
        names.discard("")
        return names, (st.st_ino, start + end)

    def save(self, seen: Seen) -> None:
        """Keep *seen* (not fsynced: a record lost in a crash costs one full pass)."""
        if seen == self._written:
            return
        body = "".join(f"{name}\n" for name in sorted(seen.pending))
        data = f"{_FORMAT} {seen.inode} {seen.offset} {seen.full_at!r}\n{body}".encode()
        try:
            atomic_write(self.record, data, durable=False)
        except FirstmateError:
            return  # (the next look is over the fleet again)
        self._written = seen


__all__ = ["OLD", "READ_MAX", "ROTATE_BYTES", "SEEN", "Changes", "Seen"]
