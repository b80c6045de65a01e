"""Which git project a directory belongs to, read from ``.git`` itself (no ``git`` process).

Home discovery runs on every hook and ``fm wake append``, so it cannot start ``git rev-parse``:
it reads what git leaves on disk. A worktree's root holds ``.git``: the repository directory in
the main worktree, or, in a linked worktree (``git worktree add``), a file ``gitdir: <dir>``
naming ``<common>/worktrees/<name>``, whose ``commondir`` names the repository shared by all
worktrees. The main worktree's root is the common directory's parent when that directory is
named ``.git``; a bare repository has none.

Only what this user owns is read, and a linked worktree counts only when the repository's own
record of it (``<gitdir>/gitdir``) points back at it, so a stray ``.git`` file cannot borrow
another project's home.
"""

from __future__ import annotations

import os
import stat

GIT = ".git"
#: The largest ``.git`` file or ``commondir``/``gitdir`` record read (they hold one path).
RECORD_LIMIT = 4096


def _mine(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid()


def _read_line(path: str) -> str | None:
    """The first line of a small regular file this user owns, or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _mine(st):
            return None
        data = os.read(fd, RECORD_LIMIT)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    line = text.splitlines()[0].strip() if text.strip() else ""
    return line or None


def worktree_root(start: str) -> str | None:
    """The nearest directory at or above *start* holding ``.git`` (a worktree's root), or None."""
    here = os.path.abspath(start)
    while True:
        if os.path.lexists(os.path.join(here, GIT)):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _gitdir(root: str) -> str | None:
    """The repository directory a ``.git`` *file* of this user's at *root* names, or None."""
    dotgit = os.path.join(root, GIT)
    try:
        st = os.lstat(dotgit)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or not _mine(st):
        return None
    line = _read_line(dotgit)
    if line is None or not line.startswith("gitdir:"):
        return None
    return os.path.join(root, line[len("gitdir:"):].strip())


def linked_main_root(root: str) -> str | None:
    """When *root* is a linked worktree's root, its main worktree's root; else None (a main
    worktree, a submodule, a bare repository's worktree, or anything that does not check out)."""
    gitdir = _gitdir(root)
    if gitdir is None:
        return None
    common_line = _read_line(os.path.join(gitdir, "commondir"))
    if common_line is None:
        return None  # a submodule's repository: it is its own project
    back = _read_line(os.path.join(gitdir, "gitdir"))
    dotgit = os.path.join(root, GIT)
    if back is None or os.path.realpath(os.path.join(gitdir, back)) != os.path.realpath(dotgit):
        return None
    common = os.path.normpath(os.path.join(gitdir, common_line))
    if os.path.basename(common) != GIT:
        return None  # a bare repository: no main worktree to hold a home
    main = os.path.dirname(common)
    return main if main != root else None


def common_dir(root: str) -> str | None:
    """The repository directory shared by every worktree of the project whose worktree root is
    *root* (where ``info/exclude`` lives), or None."""
    if os.path.isdir(os.path.join(root, GIT)) and not os.path.islink(os.path.join(root, GIT)):
        return os.path.join(root, GIT)
    gitdir = _gitdir(root)
    if gitdir is None:
        return None
    common_line = _read_line(os.path.join(gitdir, "commondir"))
    return os.path.normpath(gitdir if common_line is None else os.path.join(gitdir, common_line))


def project_root(start: str) -> str | None:
    """The root of the project *start* is in: the main worktree's root for a linked worktree,
    else the worktree's own root; None outside any git project."""
    root = worktree_root(start)
    if root is None:
        return None
    return linked_main_root(root) or root


__all__ = ["GIT", "common_dir", "linked_main_root", "project_root", "worktree_root"]
