"""The installed harness plugins, as their ``firstmate.plugins`` entry points say, through a
cached index: the one way fm finds a plugin.

Scanning every installed distribution's metadata (:func:`importlib.metadata.entry_points`) costs
a hook more than its whole start-up budget, so the scan's answer (harness name → the module and
attribute its entry point names, and its distribution's name and version) is kept in a small
file in the user's cache directory — ``$XDG_CACHE_HOME/firstmate``, else ``~/.cache/firstmate``
— one per Python environment and ``sys.path``. The file is trusted only while its key matches —
``sys.path`` and each of its directories' modification times (installing,
removing or upgrading a distribution adds or removes a ``*.dist-info`` there) — and while each
indexed plugin's ``entry_points.txt`` keeps the time it had (an edit in place). A missing,
foreign, shared-writable, corrupt or stale file means a real scan, and the answer is written
back when the directory allows (a cache that cannot be written costs only the scan; a directory
changed in the last moments keys none, so a second change within the same clock tick is never
missed). The cache lives outside every project and home, so a cloned repository cannot plant
one, and each line is checked strictly before it is used.

Standard library only, and only ``os`` and ``sys`` until a scan is needed: ``fm hook`` reads it
before its quick gate.
"""

from __future__ import annotations

import os
import sys

from firstmate.base.names import ENTRY_POINT_GROUP

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

#: The first line of an index file; another format is rescanned and rewritten.
HEADER = "firstmate plugin index 1"
#: Index files above this size are not read (a real one holds a few lines per plugin).
MAX_INDEX = 64 * 1024
#: The longest field an index line may hold.
MAX_FIELD = 200
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
#: A directory whose time is this recent (ns) keys no cache: a second change in the same
#: clock tick would not move it (the filesystem's times are as coarse as the kernel's tick).
RACY_NS = 200_000_000
#: Index files kept in the cache directory (one per environment and sys.path).
KEEP = 32
FILE_PREFIX, FILE_SUFFIX = "plugins-", ".idx"


class Entry:
    """One plugin entry point: harness *name* → ``module:attr``, from distribution *dist*."""

    __slots__ = ("attr", "dist", "module", "name", "version")

    def __init__(self, name: str, module: str, attr: str, dist: str, version: str) -> None:
        self.name, self.module, self.attr, self.dist, self.version = (
            name, module, attr, dist, version)

    def __repr__(self) -> str:
        return f"Entry({self.name!r}, {self.value!r}, {self.dist!r}, {self.version!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Entry) and self.fields() == other.fields()

    def __hash__(self) -> int:
        return hash(self.fields())

    def fields(self) -> tuple[str, str, str, str, str]:
        return self.name, self.module, self.attr, self.dist, self.version

    @property
    def value(self) -> str:
        """The entry point's value, ``module:attr`` (``module`` alone when the module is the
        plugin)."""
        return f"{self.module}:{self.attr}" if self.attr else self.module

    @property
    def package(self) -> str:
        """The package the entry point's module belongs to: its parent when it names a
        submodule (``pkg.hooks`` → ``pkg``), else the module itself. The quick gate lives
        there (docs/hooks.md)."""
        return self.module.rpartition(".")[0] or self.module

    def load(self) -> Any:
        """Import the module the entry point names and return its object (what
        :meth:`importlib.metadata.EntryPoint.load` does)."""
        __import__(self.module)
        found: Any = sys.modules[self.module]
        for part in filter(None, self.attr.split(".")):
            found = getattr(found, part)
        return found


def valid(entry: Entry) -> bool:
    """Whether every field of *entry* is one an index may hold: a harness name, dotted
    identifiers for the module and attribute, printable one-line distribution fields."""
    if not entry.name or not set(entry.name) <= _NAME_CHARS:
        return False
    if not all(part.isidentifier() for part in entry.module.split(".")):
        return False
    if entry.attr and not all(part.isidentifier() for part in entry.attr.split(".")):
        return False
    return all(len(field) <= MAX_FIELD and field.isprintable() and "\t" not in field
               for field in entry.fields())


# --- the key -----------------------------------------------------------------------------------

def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


def _path() -> list[str]:
    # "" is the current directory: named by its path, so each directory keys a cache of its own.
    return [entry or os.getcwd() for entry in sys.path]


def key() -> tuple[str, int]:
    """The text of ``sys.path`` and its directories' modification times (an install, an
    uninstall or an upgrade adds or removes a ``*.dist-info`` in one), on one line, and the
    newest of the times. Kept whole in the index: comparing it costs less than hashing it."""
    path = _path()
    times = [_mtime(entry) for entry in path]
    return repr((sys.prefix, path, times)), max(times, default=-1)


def _name_hash(text: str) -> str:
    """A short stable name for *text* (its bytes as one number, modulo a 61-bit prime): it only
    picks the index file, whose contents are checked in full, so hashlib's cost is not worth
    paying here."""
    value = int.from_bytes(text.encode("utf-8", "surrogateescape"), "big") % ((1 << 61) - 1)
    return f"{value:016x}"


def _fresh(newest: int) -> bool:
    """Whether a directory changed so recently that another change in the same clock tick would
    leave its time as it is: a cache keyed on it then is not written."""
    import time

    return newest >= time.time_ns() - RACY_NS


# --- the file ----------------------------------------------------------------------------------

def cache_dir(env: Mapping[str, str] | None = None) -> str | None:
    """The directory the index files live in; None when there is no usable home directory."""
    env = os.environ if env is None else env
    base = (env.get("XDG_CACHE_HOME") or "").strip()
    if not base or not os.path.isabs(base):
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "firstmate")


def index_file(env: Mapping[str, str] | None = None) -> str | None:
    """This interpreter's index file: one per environment and ``sys.path``."""
    folder = cache_dir(env)
    if folder is None:
        return None
    which = _name_hash(repr((sys.prefix, sys.executable, _path())))
    return os.path.join(folder, f"{FILE_PREFIX}{which}{FILE_SUFFIX}")


def parse(text: str, want: str) -> list[Entry] | None:
    """The entries of index *text* whose key is *want* and whose distributions' entry points
    are unchanged since; None when the text is not such an index (another format or key, a
    malformed line, a repeated name, a changed or missing ``entry_points.txt``)."""
    lines = text.split("\n")
    if len(lines) < 3 or lines[0] != HEADER or lines[1] != f"key {want}" or lines[-1] != "":
        return None
    entries: list[Entry] = []
    for line in lines[2:-1]:
        fields = line.split("\t")
        if len(fields) != 7 or not fields[6].lstrip("-").isdigit():
            return None
        entry = Entry(*fields[:5])
        if not valid(entry) or any(entry.name == seen.name for seen in entries):
            return None
        # Where the entry point is written, and when it was: an edit in place shows.
        if not os.path.isabs(fields[5]) or _mtime(fields[5]) != int(fields[6]):
            return None
        entries.append(entry)
    return entries


def render(entries: Iterable[tuple[Entry, str]], digest: str) -> str:
    """An index of *entries* (each with its ``entry_points.txt``) under key *digest*."""
    if "\n" in digest:
        raise ValueError("a key is one line")
    lines = [HEADER, f"key {digest}"]
    for entry, where in entries:
        if "\t" in where or "\n" in where:
            raise ValueError(f"unindexable path {where!r}")
        lines.append("\t".join((*entry.fields(), where, str(_mtime(where)))))
    return "\n".join(lines) + "\n"


def _read(path: str) -> str | None:
    """The text of *path* when it is a regular file of this user's that nobody else can write."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or st.st_size > MAX_INDEX):
            return None
        data = os.read(fd, MAX_INDEX + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _write(path: str, text: str) -> None:
    """Write the index; a directory that cannot be made or written, or one that is not this
    user's alone, leaves the cache unwritten (the next call scans again)."""
    from firstmate.base.errors import StateError
    from firstmate.base.safepaths import atomic_write, make_private_dir
    from firstmate.base.trust import verify_dir

    folder = os.path.dirname(path)
    try:
        os.makedirs(os.path.dirname(folder), 0o700, exist_ok=True)
        make_private_dir(folder)
        verify_dir(folder, "plugin index directory")
        _prune(folder)
        atomic_write(path, text.encode("utf-8"), durable=False)
    except (OSError, StateError):
        pass


def _prune(folder: str) -> None:
    """Keep the newest :data:`KEEP` index files (each environment and ``sys.path`` has one)."""
    found = []
    for child in os.scandir(folder):
        if child.name.startswith(FILE_PREFIX) and child.name.endswith(FILE_SUFFIX):
            try:
                found.append((child.stat(follow_symlinks=False).st_mtime_ns, child.path))
            except OSError:
                continue
    for _, stale in sorted(found, reverse=True)[KEEP - 1:]:
        try:  # noqa: SIM105 - contextlib costs the hook an import
            os.unlink(stale)
        except OSError:
            pass


# --- scanning and reading ----------------------------------------------------------------------

def _scan() -> list[tuple[Entry, str]]:
    from importlib.metadata import entry_points

    found: list[tuple[Entry, str]] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist: Any = getattr(ep, "dist", None)
        entry = Entry(ep.name, ep.module, ep.attr or "", str(getattr(dist, "name", "") or ""),
                      str(getattr(dist, "version", "") or ""))
        if not valid(entry) or any(entry.name == seen.name for seen, _ in found):
            continue
        meta = getattr(dist, "_path", None)  # (a PathDistribution's metadata directory)
        where = os.path.abspath(os.path.join(os.fspath(meta), "entry_points.txt")) if meta else ""
        found.append((entry, where))
    return found


def scan() -> list[Entry]:
    """The plugin entry points of the installed distributions, read from their metadata (the
    slow way; first on ``sys.path`` wins a name). Entry points no index could hold are left
    out: they name nothing importable."""
    return [entry for entry, _ in _scan()]


def entries(env: Mapping[str, str] | None = None) -> list[Entry]:
    """Every installed plugin's entry point: from the index when its key matches, else from a
    scan that rewrites it."""
    digest, newest = key()
    path = index_file(env)
    if path is not None:
        text = _read(path)
        found = parse(text, digest) if text is not None else None
        if found is not None:
            return found
    scanned = _scan()
    indexable = all(where and "\t" not in where and "\n" not in where for _, where in scanned)
    if path is not None and indexable and not _fresh(newest):
        _write(path, render(scanned, digest))
    return [entry for entry, _ in scanned]


def find(name: str, env: Mapping[str, str] | None = None) -> Entry | None:
    """The entry point of harness *name*'s plugin; None when none is installed."""
    return next((entry for entry in entries(env) if entry.name == name), None)


__all__ = ["HEADER", "Entry", "cache_dir", "entries", "find", "index_file", "key", "parse",
           "render", "scan", "valid"]
