"""One look at ``state/crew/`` per poll, for the watcher's passes over the whole fleet.

:func:`firstmate.store.crew.list` opens every registration, and a source that then reads each
crew's cursor and markers by path costs, at 500 crews, thousands of path joins, opens and reads
per poll: tens of milliseconds in which a queued row waits. A :class:`FleetScan` lists the
directory once per poll (:meth:`FleetScan.scan`) and answers from that listing: which files a
crew has, their ``lstat``, and the text of small files, re-read only when their ``lstat`` changed
(inode, size, mtime, ctime: every writer here replaces through a rename or appends, both of
which change it). What it answers is what :mod:`firstmate.store.crew` would: a symlinked or
unreadable file is left to those functions, which raise their usual errors.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from typing import NamedTuple

import attrs

from firstmate.base.errors import StateError, UsageError
from firstmate.fast import crewlog
from firstmate.store import crew as crewmod
from firstmate.store.home import Home

PANE = crewmod.PANE
#: Registrations read between two looks at a scan's *stop* (:meth:`FleetScan.scan_until`).
STOP_EVERY = 32

#: What identifies one version of a file: (inode, size, mtime_ns, ctime_ns).
FileKey = tuple[int, int, int, int]


def file_key(st: os.stat_result) -> FileKey:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _Known(NamedTuple):
    key: FileKey
    value: object


@attrs.define(eq=False)
class FleetScan:
    """A source's view of ``state/crew/``, refreshed by :meth:`scan` once per poll."""

    home: Home
    #: ``state/crew`` as a string: joined with plain f-strings in the per-crew loop.
    directory: str = attrs.field(init=False)
    #: crew name → suffix → the entry the last scan saw (or its ``lstat``, from :meth:`scan_only`).
    _files: dict[str, dict[str, os.DirEntry[str] | os.stat_result]] = attrs.field(
        factory=dict, init=False)
    #: Registrations and small files read before, by path, with the key they were read at.
    _known: dict[str, _Known] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        self.directory = str(self.home.crew_dir)

    def scan(self) -> tuple[crewmod.Crew, ...]:
        """Every registered crew, as :func:`firstmate.store.crew.list` gives them, in its order."""
        found = self.scan_until(None)
        assert found is not None
        return found

    def scan_until(self, stop: Callable[[], bool] | None) -> tuple[crewmod.Crew, ...] | None:
        """:meth:`scan`, or None when *stop* said so while registrations not read before were
        being read (checked every :data:`STOP_EVERY` of them): a new watcher's first pass over a
        large fleet reads them all, and a ring waits for none of it. What was read is kept, so
        the next scan goes on from there."""
        files: dict[str, dict[str, os.DirEntry[str] | os.stat_result]] = {}
        panes: list[tuple[str, str, os.DirEntry[str]]] = []
        try:
            with os.scandir(self.directory) as entries:
                for entry in entries:
                    base, dot, suffix = entry.name.rpartition(".")
                    if not dot or not base or entry.name.startswith("."):
                        continue  # (temporary files of a replace start with a dot)
                    files.setdefault(base, {})["." + suffix] = entry
                    if suffix == "pane":
                        panes.append((entry.name, base, entry))
        except FileNotFoundError:
            self._files = {}
            return ()
        except OSError as exc:
            raise StateError(f"cannot list {self.directory}: {exc.strerror}") from exc
        self._files = files
        crews: list[crewmod.Crew] = []
        fresh = 0
        for _, name, entry in sorted(panes, key=lambda found: found[0]):
            if not crewmod.NAME_RE.fullmatch(name):
                continue
            if stop is not None and entry.path not in self._known:
                fresh += 1
                if fresh % STOP_EVERY == 0 and stop():
                    return None
            try:
                st: os.stat_result | None = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed while we listed
            except OSError:
                st = None
            found = self._registration(name, entry.path, st)
            if found is not None:
                crews.append(found)
        return tuple(crews)

    def scan_only(self, names: Iterable[str], suffixes: Iterable[str]) -> tuple[crewmod.Crew, ...]:
        """The registered crews among *names*, as :meth:`scan` gives them, from an ``lstat`` of
        each one's *suffixes* (and registration) instead of a listing of the whole directory:
        what a source that knows which crews changed pays for those alone. The view holds only
        them until the next scan."""
        wanted = (PANE, *(suffix for suffix in suffixes if suffix != PANE))
        files: dict[str, dict[str, os.DirEntry[str] | os.stat_result]] = {}
        crews: list[crewmod.Crew] = []
        for name in sorted(set(names)):
            if not crewmod.NAME_RE.fullmatch(name):
                continue
            found: dict[str, os.DirEntry[str] | os.stat_result] = {}
            for suffix in wanted:
                try:
                    found[suffix] = os.lstat(self.path(name, suffix))
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise StateError(f"cannot read {self.path(name, suffix)}: {exc.strerror}; "
                                     "check the state directory's permissions") from exc
            files[name] = found
        self._files = files
        for name, found in files.items():
            registration = found.get(PANE)
            if isinstance(registration, os.stat_result):
                member = self._registration(name, self.path(name, PANE), registration)
                if member is not None:
                    crews.append(member)
        return tuple(crews)

    def path(self, name: str, suffix: str) -> str:
        return f"{self.directory}/{name}{suffix}"

    def stat(self, name: str, suffix: str) -> os.stat_result | None:
        """The ``lstat`` of crew *name*'s file as of the last scan; None when it had none."""
        entry = self._files.get(name, {}).get(suffix)
        if entry is None or isinstance(entry, os.stat_result):
            return entry
        try:
            return entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateError(f"cannot read {entry.path}: {exc.strerror}; check the state "
                             "directory's permissions") from exc

    def text(self, name: str, suffix: str, limit: int = 4096) -> str | None:
        """The text of a small file (:func:`firstmate.store.crew.read_text`), read again only
        when its ``lstat`` changed since it was last read here."""
        st = self.stat(name, suffix)
        where = self.path(name, suffix)
        if st is None:
            self._known.pop(where, None)
            return None
        if not stat.S_ISREG(st.st_mode):
            return crewmod.read_text(where, limit)  # (a symlink is refused there)
        key = file_key(st)
        known = self._known.get(where)
        if known is not None and known.key == key:
            return known.value if isinstance(known.value, str) else None
        text = crewmod.read_text(where, limit)
        if text is not None:
            self._known[where] = _Known(key, text)
        return text

    def forget(self, name: str, suffix: str) -> None:
        """Drop what is known of a file this process just wrote."""
        self._known.pop(self.path(name, suffix), None)

    def _registration(self, name: str, where: str, st: os.stat_result | None) -> crewmod.Crew | None:
        if st is None or not stat.S_ISREG(st.st_mode):
            try:
                return crewmod.get(self.home, name)  # raises what crew.list raises (a symlink)
            except UsageError:
                return None  # removed while we listed
        key = file_key(st)
        known = self._known.get(where)
        if known is not None and known.key == key and isinstance(known.value, crewmod.Crew):
            return known.value
        text = crewmod.read_text(where, crewlog.MAX_REGISTRATION_BYTES)
        if text is None:
            return None  # removed while we listed
        # (as crew.get reads it; the mtime is the registration's, from the same inode)
        member = crewmod.Crew.of(name, crewlog.parse_registration(text), st.st_mtime)
        self._known[where] = _Known(key, member)
        return member


__all__ = ["FileKey", "FleetScan", "file_key"]
