"""Where a home's state lives, and the safety rules for touching it.

A home holds ``config/`` and ``state/``. ``state/`` is private (0700, files 0600), and no path
inside it is ever followed through a symlink: a symlink there is refused with a one-line error.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs

from firstmate.errors import StateError

HOME_MARKER = ".firstmate"
STATE_DIR_MODE = 0o700
STATE_FILE_MODE = 0o600


def resolve_root(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path:
    """The home directory: ``FM_HOME``, else the nearest ``.firstmate/`` above *cwd*, else ``~/.firstmate``."""
    from firstmate.homeroot import find_root

    return Path(find_root(os.environ if env is None else env, None if cwd is None else str(cwd)))


def refuse_symlink(path: Path) -> None:
    """Raise :class:`StateError` when *path* exists as a symlink (it is never followed)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise StateError(
            f"refusing symlinked state path {path}: remove the link and let fm recreate it"
        )


@attrs.frozen
class Home:
    """The paths of one home. Creating the object touches nothing; :meth:`ensure` prepares it."""

    root: Path

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def db(self) -> Path:
        return self.state / "firstmate.db"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def crew_dir(self) -> Path:
        return self.state / "crew"

    @property
    def beacon(self) -> Path:
        return self.state / "watcher.beat"

    @property
    def away_record(self) -> Path:
        return self.state / "away"

    def lock_path(self, name: str) -> Path:
        return self.state / f"{name}.lock"

    def ensure(self) -> Home:
        """Create ``state/`` (0700), ``state/logs`` and ``config/`` if absent; refuse symlinks."""
        if not self.root.exists():
            try:
                self.root.mkdir(parents=True, mode=0o755)
            except OSError as exc:
                raise StateError(
                    f"cannot create home {self.root}: {exc.strerror}; set FM_HOME to a writable directory"
                ) from exc
        for path, mode in ((self.state, STATE_DIR_MODE), (self.logs, STATE_DIR_MODE),
                           (self.crew_dir, STATE_DIR_MODE), (self.config, 0o755)):
            make_private_dir(path, mode)
        return self

    def check_ground(self) -> None:
        """Raise :class:`StateError` unless the home and its state directory still exist."""
        for path in (self.root, self.state):
            refuse_symlink(path)
            if not path.is_dir():
                raise StateError(f"{path} no longer exists; recreate the home or point FM_HOME at one")


def make_private_dir(path: Path, mode: int = STATE_DIR_MODE) -> None:
    refuse_symlink(path)
    try:
        path.mkdir(mode=mode, exist_ok=True)
    except FileExistsError as exc:
        raise StateError(f"{path} exists but is not a directory; move it aside and retry") from exc
    except OSError as exc:
        raise StateError(f"cannot create {path}: {exc.strerror}; check the permissions of its parent") from exc
    refuse_symlink(path)
    if not path.is_dir():
        raise StateError(f"{path} exists but is not a directory; move it aside and retry")
    if mode == STATE_DIR_MODE:
        # Best effort: a read-only filesystem (EROFS) or a foreign owner must surface later as the
        # one-line error of the write that needs the directory, not as a crash here.
        with contextlib.suppress(OSError):
            os.chmod(path, mode)


def open_private(path: Path, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    """Open a state file without following a symlink, created 0600. Returns a file descriptor."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, STATE_FILE_MODE)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the final component is a symlink
            raise StateError(
                f"refusing symlinked state path {path}: remove the link and let fm recreate it"
            ) from exc
        raise StateError(f"cannot open {path}: {exc.strerror}; check that the state directory is writable") from exc


def atomic_write(path: Path, data: bytes) -> None:
    """Replace *path* with *data* through a private temporary file and a rename."""
    refuse_symlink(path)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def open_home(env: Mapping[str, str] | None = None, cwd: Path | None = None, *, create: bool = True) -> Home:
    home = Home(resolve_root(env, cwd))
    if create:
        return home.ensure()
    home.check_ground()
    return home
