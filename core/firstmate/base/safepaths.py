"""The safety rules for touching a home's files, as plain functions over path strings.

:mod:`firstmate.store.home` re-exports these; they live here, free of attrs and pathlib, because
``fm wake append`` needs them on a path that must start fast. ``state/`` is private (0700,
files 0600), and no path inside it is ever followed through a symlink.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate.base.errors import StateError

    StrPath = str | os.PathLike[str]

STATE_DIR_MODE = 0o700
STATE_FILE_MODE = 0o600


def state_error(message: str) -> StateError:
    # Imported on failure only: the error classes pull in enum, which a quiet append never needs.
    from firstmate.base.errors import StateError

    return StateError(message)


def refuse_symlink(path: StrPath) -> None:
    """Raise :class:`StateError` when *path* exists as a symlink (it is never followed)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise state_error(
            f"refusing symlinked state path {os.fspath(path)}: remove the link and let fm recreate it"
        )


def refuse_non_directory(path: StrPath) -> None:
    """Raise :class:`StateError` when *path* exists but is not a directory (or is a symlink)."""
    refuse_symlink(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise state_error(f"{os.fspath(path)} exists but is not a directory; move it aside and retry")


def make_private_dir(path: StrPath, mode: int = STATE_DIR_MODE) -> bool:
    """Create the directory *path* (or accept the one there); True when this call created it."""
    try:
        st = os.lstat(path)
    except OSError:
        pass
    else:  # already as wanted (every command passes here: one system call, not six)
        if stat.S_ISDIR(st.st_mode) and (mode != STATE_DIR_MODE
                                         or stat.S_IMODE(st.st_mode) == mode):
            return False
    refuse_symlink(path)
    created = False
    try:
        os.mkdir(path, mode)
        created = True
    except OSError as exc:
        if not os.path.isdir(path):  # an existing directory is fine (mkdir's exist_ok)
            if isinstance(exc, FileExistsError):
                raise state_error(
                    f"{os.fspath(path)} exists but is not a directory; move it aside and retry"
                ) from exc
            raise state_error(
                f"cannot create {os.fspath(path)}: {exc.strerror}; check the permissions of its parent"
            ) from exc
    refuse_symlink(path)
    if not os.path.isdir(path):
        raise state_error(f"{os.fspath(path)} exists but is not a directory; move it aside and retry")
    if mode == STATE_DIR_MODE:
        # Best effort: a read-only filesystem (EROFS) or a foreign owner must surface later as the
        # one-line error of the write that needs the directory, not as a crash here.
        try:  # noqa: SIM105 - contextlib costs the fast path an import
            os.chmod(path, mode)
        except OSError:
            pass
    return created


def ensure_home(root: StrPath) -> bool:
    """Create the home, ``state/`` (0700), ``state/logs``, ``state/crew`` and ``config/`` if
    absent; refuse symlinks. True when this call made a new home: it created ``state/`` (the
    home, or its state, did not exist before; a concurrent first call gets False).
    :func:`firstmate.base.homemark.ensure_home` also marks a new state as this user's: use that
    one (:meth:`firstmate.store.home.Home.ensure` does)."""
    root = os.fspath(root)
    if not os.path.exists(root):
        try:
            os.makedirs(root, 0o755)
        except FileExistsError:
            pass  # another first command made it meanwhile
        except OSError as exc:
            raise state_error(
                f"cannot create home {root}: {exc.strerror}; set FM_HOME to a writable directory"
            ) from exc
    from firstmate.base.trust import verify_dir

    verify_dir(root)  # (created here or not: someone else's directory is never written into)
    state = os.path.join(root, "state")
    created = make_private_dir(state, STATE_DIR_MODE)
    for path, mode in ((os.path.join(state, "logs"), STATE_DIR_MODE),
                       (os.path.join(state, "crew"), STATE_DIR_MODE),
                       (os.path.join(root, "config"), 0o755)):
        make_private_dir(path, mode)
    verify_dir(state, "state directory")
    return created


def open_private(path: StrPath, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    """Open a state file without following a symlink, created 0600. Returns a file descriptor."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, STATE_FILE_MODE)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the final component is a symlink
            raise state_error(
                f"refusing symlinked state path {os.fspath(path)}: remove the link and let fm recreate it"
            ) from exc
        raise state_error(
            f"cannot open {os.fspath(path)}: {exc.strerror}; check that the state directory is writable"
        ) from exc


def atomic_write(path: StrPath, data: bytes, *, durable: bool = True) -> None:
    """Replace *path* with *data* through a private temporary file beside it and a rename.
    *durable* False skips the fsync: for caches whose loss in a crash costs only a re-read."""
    path = os.fspath(path)
    refuse_symlink(path)
    head, name = os.path.split(path)
    # A name of its own per call, not per process: two threads writing the same file must not
    # write into one temporary file, nor rename it from under each other.
    tmp = os.path.join(head, f".{name}.tmp.{os.getpid()}.{os.urandom(4).hex()}")
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:  # noqa: SIM105 - contextlib costs the fast path an import
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):  # (nothing was written: the old file is untouched)
            raise state_error(f"cannot write {path}: {exc.strerror}; free space on its filesystem "
                              "or fix its directory's permissions, then retry") from exc
        raise


__all__ = ["STATE_DIR_MODE", "STATE_FILE_MODE", "atomic_write", "ensure_home", "make_private_dir",
           "open_private", "refuse_symlink", "state_error"]
