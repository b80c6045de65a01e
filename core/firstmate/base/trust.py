"""The trust boundary: which directories and files fm may act on, with nothing but ``os``.

fm runs commands a home names (state checks, the supervision host's engine), so a home must be
one nobody else can write. A directory fm trusts is owned by the invoking user and writable by
nobody else; every directory above it must be one only this user or root can change (a
world-writable one only with the sticky bit). Anything else is refused with a
:class:`~firstmate.base.errors.StateError` (exit 4) naming the fix. Discovery of a ``.firstmate/``
above the current directory passes over one owned by someone else (see
:func:`firstmate.base.homeroot.find_root`). Secrets that authenticate a home's commands live outside
the home (:mod:`firstmate.base.keyring`), so a copied or committed home authenticates nothing.

Stdlib-only: the hook and ``fm wake append`` fast paths call it on every run.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate.base.errors import StateError

#: Write bits for the group and for others.
SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _error(message: str) -> StateError:
    from firstmate.base.errors import StateError

    return StateError(message)


def owned_by_me(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid()


def verify_dir(path: str, what: str = "home directory") -> bool:
    """Refuse *path* unless it is a directory this user owns that nobody else can write.
    Returns False when it does not exist (nothing to trust yet)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _error(f"cannot inspect {path}: {exc.strerror}; check the permissions of its "
                     "parent") from exc
    if stat.S_ISLNK(st.st_mode):
        raise _error(f"refusing symlinked state path {path} (the {what}): replace the link "
                     "with a directory of yours")
    if not stat.S_ISDIR(st.st_mode):
        raise _error(f"{what} {path} exists but is not a directory; move it aside, or set "
                     "FM_HOME to a directory")
    _require_mine(st, path, what, "fm only uses a home you own: set FM_HOME to one of yours")
    return True


def verify_file(path: str, what: str) -> bool:
    """Refuse an existing file fm would trust unless this user owns it and nobody else can
    write it. Returns False when it does not exist."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _error(f"cannot inspect {path}: {exc.strerror}; check its permissions") from exc
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise _error(f"{what} {path} is not a regular file; remove it and let fm recreate it")
    _require_mine(st, path, what, "remove it and let fm recreate it")
    return True


def untrusted(st: os.stat_result) -> str | None:
    """Why a file or directory with status *st* is not this user's alone, or None."""
    if not owned_by_me(st):
        return f"owned by uid {st.st_uid}"
    if st.st_mode & SHARED_WRITE:
        return f"writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _require_mine(st: os.stat_result, path: str, what: str, owner_fix: str) -> None:
    why = untrusted(st)
    if why is None:
        return
    if not owned_by_me(st):
        raise _error(f"{what} {path} is {why}, not by you (uid {os.geteuid()}); {owner_fix}")
    raise _error(f"{what} {path} is {why}; run: chmod go-w {path}")


def verify_ancestors(path: str) -> None:
    """Refuse *path* when a directory above it could be changed by another user: owned by
    someone other than this user or root, or world-writable without the sticky bit (either
    could rename the home away and put their own in its place)."""
    me = os.geteuid()
    here = os.path.dirname(os.path.abspath(path))
    while True:
        try:
            st = os.stat(here)
        except OSError:
            st = None  # not there yet (a home about to be created below it)
        if st is not None:
            if st.st_uid not in (me, 0):
                raise _error(f"{here} (above the home {path}) is owned by uid {st.st_uid}, "
                             "who could replace the home; keep the home under directories "
                             "you or root own, or set FM_HOME elsewhere")
            if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
                raise _error(f"{here} (above the home {path}) is world-writable without the "
                             "sticky bit, so any user could replace the home; run: chmod o-w "
                             f"{here}, or set FM_HOME elsewhere")
        parent = os.path.dirname(here)
        if parent == here:
            return
        here = parent


def verify_home(root: str) -> str:
    """The whole check for a home: its ancestors, the home and its ``state/``. Returns what is
    there: ``"absent"`` (no home yet), ``"bare"`` (the directory without ``state/``) or
    ``"state"``."""
    verify_ancestors(root)
    if not verify_dir(root):
        return "absent"
    return "state" if verify_dir(os.path.join(root, "state"), "state directory") else "bare"


def adoptable(marker: str) -> bool:
    """A discovered ``.firstmate/`` may be adopted: a real directory this user owns."""
    try:
        st = os.lstat(marker)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and owned_by_me(st)


__all__ = ["adoptable", "untrusted", "verify_ancestors", "verify_dir", "verify_file",
           "verify_home"]
