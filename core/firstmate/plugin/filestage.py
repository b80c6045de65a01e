"""All of an install's file changes, or none of them: each write staged beside its target, then
all put in place together.

``fm install`` changes several files at once: a harness's settings and its protocol file, a shim
and the client it imports, the install record in the home. Written one after the other, a full
disk or a failure halfway would leave a shim importing a missing client, or hooks without their
record. Inside :func:`transaction` nothing is written over a target until every change is
ready: each new file's bytes go to a hidden temporary file beside its target (fsynced), each
file to be replaced or removed is kept by a hard link (no space needed), and the directories
made for them are noted. Only then are the temporary files renamed into place; a failure at any
point removes what was staged and puts back what was already replaced, so every file is as it
was. Outside a transaction a change is made at once, the same way, one file at a time.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

#: How fm names what it stages beside a target (a hidden name, never one of the user's).
STAGE_TAG = ".fm-stage."
KEEP_TAG = ".fm-keep."


@attrs.define(eq=False)
class _Change:
    path: str
    #: The new bytes; None removes the file.
    data: bytes | None
    #: Create only when absent (a backup is never overwritten).
    exclusive: bool = False
    prune_upto: str | None = None
    #: Directories to remove while empty after the file is removed (deepest last in the list).
    prune_dirs: tuple[str, ...] = ()
    staged: str | None = None
    kept: str | None = None
    done: bool = False


@attrs.define(eq=False)
class Transaction:
    """The changes staged so far (see the module docstring). Made by :func:`transaction`."""

    changes: list[_Change] = attrs.Factory(list)
    #: Directories this transaction created, in creation order (removed again on a failure).
    made_dirs: list[str] = attrs.Factory(list)
    made_files: list[str] = attrs.Factory(list)
    _count: int = 0

    def _name(self, path: str, tag: str) -> str:
        self._count += 1
        head, name = os.path.split(path)
        return os.path.join(head, f".{name}{tag}{os.getpid()}.{self._count}")

    def pending(self, path: str) -> _Change | None:
        """The newest change staged for *path*, if any."""
        for change in reversed(self.changes):
            if change.path == path:
                return change
        return None

    def note_dirs(self, paths: list[str]) -> None:
        """Directories made for this transaction elsewhere (a new home): removed on failure."""
        self.made_dirs.extend(paths)

    def note_files(self, paths: list[str]) -> None:
        """Files made for this transaction elsewhere (a new home's mark): removed on failure,
        before the directories noted."""
        self.made_files.extend(paths)

    # --- staging ----------------------------------------------------------------------------

    def stage(self, change: _Change, mode: int | None) -> None:
        self.changes.append(change)
        if change.data is None:
            if os.path.lexists(change.path):
                change.kept = self._keep(change.path)
            return
        self._make_parents(os.path.dirname(change.path))
        change.staged = self._name(change.path, STAGE_TAG)
        _write_new(change.staged, change.data, mode)
        if not change.exclusive and os.path.lexists(change.path) \
                and self.pending_kept(change) is None:
            change.kept = self._keep(change.path)

    def pending_kept(self, change: _Change) -> str | None:
        """The keep of an earlier change of the same path (the original is kept only once)."""
        for earlier in self.changes:
            if earlier is not change and earlier.path == change.path and earlier.kept:
                return earlier.kept
        return None

    def _keep(self, path: str) -> str:
        kept = self._name(path, KEEP_TAG)
        try:
            os.link(path, kept, follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
            with open(path, "rb") as fh:  # a filesystem without hard links: a copy
                data = fh.read()
            _write_new(kept, data, os.stat(path).st_mode & 0o7777)
        return kept

    def _make_parents(self, directory: str) -> None:
        missing: list[str] = []
        here = directory
        while not os.path.isdir(here):
            missing.append(here)
            parent = os.path.dirname(here)
            if parent == here:
                break
            here = parent
        for path in reversed(missing):
            os.mkdir(path)
            self.made_dirs.append(path)

    # --- the end ----------------------------------------------------------------------------

    def commit(self) -> None:
        for change in self.changes:
            if change.data is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(change.path)
                change.done = True
                continue
            assert change.staged is not None
            if not change.exclusive:
                os.replace(change.staged, change.path)
                change.done = True
                continue
            try:
                os.link(change.staged, change.path, follow_symlinks=False)
                change.done = True
            except FileExistsError:
                pass  # one made meanwhile is kept as it is
            with contextlib.suppress(OSError):
                os.unlink(change.staged)
        self._finish()

    def _finish(self) -> None:
        for change in self.changes:
            if change.kept is not None:
                with contextlib.suppress(OSError):
                    os.unlink(change.kept)
        for change in self.changes:
            if change.data is None and change.prune_upto is not None:
                prune(Path(change.path).parent, Path(change.prune_upto))
        # Deepest first over every removed file's directories: two files may share them.
        dirs = {d for change in self.changes if change.data is None for d in change.prune_dirs}
        for directory in sorted(dirs, key=lambda d: d.count(os.sep), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(directory)  # (only while empty)

    def roll_back(self) -> None:
        """Undo every change made and remove everything staged; best effort, never raises."""
        for change in reversed(self.changes):
            with contextlib.suppress(OSError):
                if change.done and change.kept is not None:
                    os.replace(change.kept, change.path)
                    change.kept = None
                elif change.done and change.data is not None and \
                        (change.exclusive or self.pending_kept(change) is None):
                    os.unlink(change.path)
            for leftover in (change.staged, change.kept):
                if leftover is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(leftover)
        for made in self.made_files:
            with contextlib.suppress(OSError):
                os.unlink(made)
        for directory in reversed(self.made_dirs):
            with contextlib.suppress(OSError):
                os.rmdir(directory)


#: errnos of a filesystem that has no hard links (EPERM, EXDEV, EMLINK, ENOTSUP/EOPNOTSUPP).
_NO_LINKS = frozenset({1, 18, 31, 95})

_ACTIVE: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar(
    "firstmate_filestage", default=None)


def _write_new(path: str, data: bytes, mode: int | None) -> None:
    """Write *data* to the new file *path* (fsynced), removing it again on any failure."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o666 if mode is None else 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(path, mode)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def prune(directory: Path, root: Path) -> None:
    """Remove *directory* and its parents below *root* while they are empty."""
    while directory != root and root in directory.parents:
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent


@contextlib.contextmanager
def transaction() -> Iterator[Transaction]:
    """Stage every change made inside; commit them all at the end, or none on an exception.
    Nested, the inner block joins the outer one (which commits)."""
    outer = _ACTIVE.get()
    if outer is not None:
        yield outer
        return
    tx = Transaction()
    token = _ACTIVE.set(tx)
    try:
        yield tx
    except BaseException:
        _ACTIVE.reset(token)
        tx.roll_back()
        raise
    _ACTIVE.reset(token)
    _commit(tx)


def _commit(tx: Transaction) -> None:
    """Put every staged change in place, or (on a failure) none: one-line error."""
    try:
        tx.commit()
    except OSError as exc:
        tx.roll_back()
        from firstmate.base.errors import FirstmateError

        where = f" {exc.filename}" if exc.filename else ""
        raise FirstmateError(f"cannot put the changed files in place ({exc.strerror}{where}); "
                             "nothing was changed: fix that and rerun") from exc
    except BaseException:
        tx.roll_back()
        raise


def active() -> Transaction | None:
    return _ACTIVE.get()


def write(path: Path, data: bytes, *, mode: int | None = None, exclusive: bool = False) -> bool:
    """Make *path* hold *data* (with *mode*, else the umask's default for a new file). With
    *exclusive* only when no file is there: False when one is. Raises OSError (nothing of this
    change written)."""
    tx = _ACTIVE.get()
    key = os.path.abspath(path)
    if exclusive and exists(Path(key)):
        return False
    if tx is not None:
        tx.stage(_Change(key, data, exclusive), mode)
        return True
    single = Transaction()
    try:
        single.stage(_Change(key, data, exclusive), mode)
    except BaseException:
        single.roll_back()
        raise
    _commit(single)
    return any(change.done for change in single.changes)


def remove(path: Path, *, prune_upto: Path | None = None, prune_dirs: Sequence[str] = ()) -> None:
    """Remove *path* (then the directories that held it while empty, up to *prune_upto*; and
    *prune_dirs*, outermost first, deepest removed first, while empty)."""
    key = os.path.abspath(path)
    change = _Change(key, None, prune_upto=None if prune_upto is None else str(prune_upto),
                     prune_dirs=tuple(prune_dirs))
    tx = _ACTIVE.get()
    if tx is not None:
        tx.stage(change, None)
        return
    single = Transaction()
    try:
        single.stage(change, None)
    except BaseException:
        single.roll_back()
        raise
    _commit(single)


def pending(path: Path) -> tuple[bool, bytes | None]:
    """``(True, bytes or None)`` when this transaction already changed *path* (None: removed),
    else ``(False, None)``: a read inside a transaction sees its own staged changes."""
    tx = _ACTIVE.get()
    change = None if tx is None else tx.pending(os.path.abspath(path))
    if change is None:
        return False, None
    return True, change.data


def read(path: Path, limit: int) -> bytes | None:
    """*path*'s bytes as this transaction leaves it (None: absent or unreadable), at most
    *limit* of them; a symlink there is not followed."""
    staged, data = pending(path)
    if staged:
        return data
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        try:
            return fh.read(limit)
        except OSError:
            return None


def mode(path: Path) -> int:
    """*path*'s permission bits as this transaction leaves it: a file it already wrote has the
    mode staged for it (one it created exists only as its staged file yet). Raises OSError."""
    tx = _ACTIVE.get()
    change = None if tx is None else tx.pending(os.path.abspath(path))
    target = change.staged if change is not None and change.staged is not None else path
    return os.stat(target).st_mode & 0o7777


def exists(path: Path) -> bool:
    """Whether *path* exists, as this transaction will leave it."""
    staged, data = pending(path)
    return data is not None if staged else os.path.lexists(path)


__all__ = ["KEEP_TAG", "STAGE_TAG", "Transaction", "active", "exists", "mode", "pending",
           "prune", "read", "remove", "transaction", "write"]
