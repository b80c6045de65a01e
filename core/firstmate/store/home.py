"""Where a home's state lives, and the safety rules for touching it.

A home holds ``config/`` and ``state/``. ``state/`` is private (0700, files 0600), and no path
inside it is ever followed through a symlink: a symlink there is refused with a one-line error.
The rules themselves are plain functions in :mod:`firstmate.base.safepaths` (re-exported here), so
the ``fm wake append`` fast path can use them without importing attrs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs

from firstmate.base.errors import StateError
from firstmate.base.safepaths import (
    STATE_DIR_MODE,
    STATE_FILE_MODE,
    atomic_write,
    make_private_dir,
    open_private,
    refuse_symlink,
)

HOME_MARKER = ".firstmate"


def resolve_root(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path:
    """The home directory: ``FM_HOME``, else the nearest ``.firstmate/`` above *cwd*, else ``~/.firstmate``."""
    from firstmate.base.homeroot import find_root

    return Path(find_root(os.environ if env is None else env, None if cwd is None else str(cwd)))


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

    def ensure(self, *, announce: Mapping[str, str] | None = None,
               cwd: Path | None = None) -> Home:
        """Create ``state/`` (0700), ``state/logs`` and ``config/`` if absent; refuse symlinks.

        *announce* is the environment the root was resolved from (and *cwd* the directory):
        given, a new home this call made is announced in one line on stderr
        (:func:`firstmate.base.homeroot.announce_created`). Commands pass it; library callers
        and harness hooks do not.
        """
        from firstmate.base.homemark import ensure_home

        env = os.environ if announce is None else announce
        if ensure_home(str(self.root), env) and announce is not None:
            from firstmate.base.homeroot import announce_created

            announce_created(str(self.root), announce, None if cwd is None else str(cwd))
        return self

    def check_ground(self) -> None:
        """Raise :class:`StateError` unless the home and its state directory still exist."""
        for path in (self.root, self.state):
            refuse_symlink(path)
            if not path.is_dir():
                raise StateError(f"{path} no longer exists; recreate the home or point FM_HOME at one")


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def open_home(env: Mapping[str, str] | None = None, cwd: Path | None = None, *, create: bool = True) -> Home:
    """The home *env* names (see :func:`resolve_root`). *create*: make it when absent, saying so
    on stderr (a mistyped ``FM_HOME`` must not silently start an empty home); else it must
    exist (:class:`StateError`)."""
    home = Home(resolve_root(env, cwd))
    if create:
        return home.ensure(announce=os.environ if env is None else env, cwd=cwd)
    home.check_ground()
    return home


__all__ = [
    "HOME_MARKER",
    "STATE_DIR_MODE",
    "STATE_FILE_MODE",
    "Home",
    "atomic_write",
    "make_private_dir",
    "open_home",
    "open_private",
    "private_umask",
    "refuse_symlink",
    "resolve_root",
]
