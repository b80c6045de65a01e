"""What an install changed, kept in the home, so that an uninstall can put it back exactly.

Before ``fm install`` first changes a file, the keeper records in the home's ``state/installs/``
whether the file existed and, if it did, its original bytes (never a ``.fm-backup`` beside it in
the project), the directories the install makes for it, and the ``info/exclude`` line it adds
(:mod:`firstmate.plugin.gitexclude`). ``fm uninstall`` then restores the original byte for byte
(formatting, key order) when the file is still as fm left it, removes a file fm created, and
removes the directories fm made while they are empty; a file the user changed since keeps their
changes (only fm's entries are taken out). An install that finds the file changed since fm last
wrote it marks the record *edited*: the file now holds the user's changes too, so however fm
rewrites it, the uninstall only takes fm's entries out (the original still says what the user
had before, such as a name they had approved). An install that finds a file it had kept gone
starts afresh, as if fm created it.

In a git project a file whose entry names this machine's paths (a *personal* file: hook
commands, a shim's ``launch.json``) never goes into a file git tracks: that is refused, naming
the fix. Every file fm creates in the project, and every personal file it merges into, is kept out
of git.

The keeper is active while :class:`firstmate.plugin.manager.PluginHost` runs an install or
uninstall for a home (:func:`session`); :mod:`firstmate.plugin.configfiles` asks it through
:func:`current`. A library call outside that keeps nothing and leaves git alone.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from firstmate.base import gitroot
from firstmate.base.fasthash import sha256_hex
from firstmate.plugin import filestage, gitexclude
from firstmate.store.home import Home

FOLDER = "installs"
#: Where older fm versions kept a file's original: beside it, in the project.
LEGACY_BACKUP_SUFFIX = ".fm-backup"
READ_LIMIT = 8 * 1024 * 1024


class TrackedPersonalFile(Exception):
    """A personal file git tracks (reported by configfiles as a ConfigFileError)."""


@attrs.frozen
class Kept:
    """What the keeper knows about one file fm changed."""

    path: str
    #: The file was there before fm first changed it (its bytes are kept beside the record).
    existed: bool
    #: The SHA-256 of the bytes fm last wrote ("" when none yet).
    written: str = ""
    #: Directories the install made for the file, outermost first.
    dirs: tuple[str, ...] = ()
    #: The ``info/exclude`` pattern fm added for the file ("" when none).
    excluded: str = ""
    #: The user changed the file after fm wrote it: the original no longer stands for it.
    edited: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "existed": self.existed, "written": self.written,
                "dirs": list(self.dirs), "excluded": self.excluded, "edited": self.edited}


def _kept(raw: object) -> Kept | None:
    if not isinstance(raw, dict):
        return None
    path, dirs = raw.get("path"), raw.get("dirs", [])
    written, excluded = raw.get("written", ""), raw.get("excluded", "")
    if not isinstance(path, str) or not isinstance(dirs, list) or \
            not all(isinstance(d, str) for d in dirs) or not isinstance(written, str) or \
            not isinstance(excluded, str):
        return None
    return Kept(path, raw.get("existed") is True, written, tuple(dirs), excluded,
                raw.get("edited") is True)


@attrs.define(eq=False)
class Keeper:
    """One install's or uninstall's record keeper (see the module docstring)."""

    home: Home
    project: Path
    dry_run: bool
    #: The project's git worktree root, None outside git.
    worktree: str | None
    exclude: Path | None
    _add: list[str] = attrs.Factory(list)
    _drop: list[str] = attrs.Factory(list)
    _settled: list[Path] = attrs.Factory(list)

    # --- where records live -----------------------------------------------------------------

    def shared(self, path: Path) -> bool:
        """Whether *path* lies outside the project (a user-level file every project's install
        may share): its record is the user's, not one home's, and outlives one uninstall."""
        here = os.path.abspath(path)
        top = self.worktree or str(self.project)
        return not (here == top or here.startswith(top.rstrip(os.sep) + os.sep))

    def _folder(self, path: Path) -> Path:
        if self.shared(path):
            from firstmate.base.keyring import keys_dir

            return Path(os.path.dirname(keys_dir(os.environ))) / FOLDER
        return self.home.state / FOLDER

    def _files(self, path: Path) -> tuple[Path, Path]:
        key = sha256_hex(os.path.abspath(path).encode("utf-8", "surrogateescape"))[:24]
        folder = self._folder(path)
        return folder / f"{key}.json", folder / f"{key}.orig"

    def _read(self, file: Path) -> bytes | None:
        return filestage.read(file, READ_LIMIT)

    def load(self, path: Path) -> Kept | None:
        record, _orig = self._files(path)
        data = self._read(record)
        if data is None:
            return None
        try:
            kept = _kept(json.loads(data.decode("utf-8")))
        except (ValueError, RecursionError):
            return None
        return kept if kept is not None and kept.path == os.path.abspath(path) else None

    def original(self, path: Path) -> bytes | None:
        return self._read(self._files(path)[1])

    def _save(self, kept: Kept, original: bytes | None = None) -> None:
        if self.dry_run:
            return
        record, orig = self._files(Path(kept.path))
        if self.shared(Path(kept.path)):
            _private_folder(record.parent)
        elif not self.home.state.is_dir():
            self.home.ensure()  # (a library call into a home never set up)
        if original is not None:
            filestage.write(orig, original, mode=0o600)
        filestage.write(record, (json.dumps(kept.to_json(), indent=1) + "\n").encode(),
                        mode=0o600)

    def _drop_original(self, path: Path) -> None:
        orig = self._files(path)[1]
        if not self.dry_run and filestage.exists(orig):
            filestage.remove(orig)

    def forget(self, path: Path) -> None:
        """Drop the record of *path* (its uninstall is done) and fm's exclude line for it."""
        kept = self.load(path)
        if kept is None:
            return
        if kept.excluded:
            self._drop.append(kept.excluded)
        if self.dry_run:
            return
        for file in self._files(path):
            if filestage.exists(file):
                filestage.remove(file)

    # --- install side -------------------------------------------------------------------------

    def changing(self, path: Path, old: bytes | None, *, personal: bool) -> Path | None:
        """*path* is about to go from *old* to new bytes. Records it the first time (its
        original, the directories made for it, its exclude line) and returns where the
        original is kept, or None when there was none. Raises :class:`TrackedPersonalFile`."""
        inside = self._pattern(path)
        if personal and inside is not None and old is not None and self.worktree is not None \
                and gitexclude.tracked(self.worktree, [path]):
            raise TrackedPersonalFile(str(path))
        self._settled = [p for p in self._settled if os.path.abspath(p) != os.path.abspath(path)]
        kept = self.load(path)
        if kept is not None and kept.written and \
                (old is None or sha256_hex(old) != kept.written):
            # The user changed the file since fm wrote it: what this install writes holds their
            # change, so it must not look "as fm left it" to the uninstall.
            if old is None and kept.existed:
                self._drop_original(path)  # they removed it: the original is no longer theirs
                kept = None
            elif old is not None and not kept.edited:
                kept = attrs.evolve(kept, edited=True)
                self._save(kept)
        if kept is None:
            original = old
            legacy = Path(str(path) + LEGACY_BACKUP_SUFFIX)
            if old is not None and filestage.exists(legacy):
                original = self._read(legacy)  # an older fm's backup: the true original
                if not self.dry_run:
                    filestage.remove(legacy)
            excluded = inside if inside is not None and (old is None or personal) else ""
            kept = Kept(os.path.abspath(path), old is not None, "", _missing_dirs(path),
                        excluded or "")
            self._save(kept, original if original is not None else None)
        if kept.excluded:
            self._add.append(kept.excluded)
        return self._files(path)[1] if kept.existed else None

    def adopt_legacy(self, path: Path, current: bytes) -> None:
        """*path* (holding *current*, as an install wants it) has no record but an older fm's
        ``.fm-backup`` beside it: keep that original in the home instead, and the file as
        written by fm."""
        legacy = Path(str(path) + LEGACY_BACKUP_SUFFIX)
        if self.load(path) is not None or not filestage.exists(legacy):
            return
        original = self._read(legacy)
        if original is None or self.dry_run:
            return
        self._save(Kept(os.path.abspath(path), True, sha256_hex(current)), original)
        filestage.remove(legacy)

    def wrote(self, path: Path, new: bytes) -> None:
        kept = self.load(path)
        if kept is not None:
            self._save(attrs.evolve(kept, written=sha256_hex(new)))

    # --- uninstall side -----------------------------------------------------------------------

    def untouched(self, path: Path, current: bytes | None) -> Kept | None:
        """The record of *path* when the file is exactly as fm last wrote it."""
        kept = self.load(path)
        if kept is None or current is None or not kept.written or kept.edited:
            return None
        return kept if sha256_hex(current) == kept.written else None

    def settled(self, path: Path) -> None:
        """The uninstall took fm's entries out of *path*: its record is forgotten at the end of
        the session, so that a later change to the same file in it (hooks, then an approval)
        still finds the original and puts it back once the file means what it did."""
        self._settled.append(path)

    # --- the end ------------------------------------------------------------------------------

    def finish(self) -> None:
        """Forget the records of settled files; stage fm's exclude lines as this session left
        them."""
        for path in self._settled:
            self.forget(path)
        if self.exclude is None or not (self._add or self._drop):
            return
        drop = [p for p in self._drop if p not in self._add]
        gitexclude.update(self.exclude, self._add, drop, dry_run=self.dry_run)

    def _pattern(self, path: Path) -> str | None:
        if self.worktree is None:
            return None
        return gitexclude.pattern(self.worktree, path)


def _private_folder(folder: Path) -> None:
    """The user's own record folder beside the keys directory (0700, checked like it)."""
    from firstmate.base.safepaths import make_private_dir
    from firstmate.base.trust import verify_ancestors, verify_dir

    verify_ancestors(str(folder))
    os.makedirs(folder.parent, 0o700, exist_ok=True)
    make_private_dir(folder)
    verify_dir(str(folder), "install records folder")


def missing_dirs(directory: str) -> list[str]:
    """*directory* and the directories above it that do not exist yet, outermost first: what
    making it creates."""
    missing: list[str] = []
    here = os.path.abspath(directory)
    while not os.path.lexists(here):
        missing.insert(0, here)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    return missing


def _missing_dirs(path: Path) -> tuple[str, ...]:
    """The directories writing *path* creates, outermost first."""
    return tuple(missing_dirs(os.path.dirname(os.path.abspath(path))))


_CURRENT: contextvars.ContextVar[Keeper | None] = contextvars.ContextVar(
    "firstmate_installkeep", default=None)


def current() -> Keeper | None:
    return _CURRENT.get()


@contextlib.contextmanager
def session(home: Home, project: Path, *, dry_run: bool) -> Iterator[Keeper]:
    """Keep what an install or uninstall into *project* changes, in *home*, inside one
    :func:`firstmate.plugin.filestage.transaction`."""
    worktree = gitroot.worktree_root(str(project)) if project.is_dir() else None
    exclude = None if worktree is None else gitexclude.exclude_file(worktree)
    keeper = Keeper(home, project, dry_run, worktree if exclude is not None else None, exclude)
    with filestage.transaction():
        token = _CURRENT.set(keeper)
        try:
            yield keeper
            keeper.finish()
        finally:
            _CURRENT.reset(token)


__all__ = ["FOLDER", "LEGACY_BACKUP_SUFFIX", "Keeper", "Kept", "TrackedPersonalFile", "current",
           "missing_dirs", "session"]
