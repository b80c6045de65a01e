"""Is the caller a genuine primary? Crew and scout worktrees must leave the backstops inert.

Crews usually inherit the captain's ``FM_HOME`` (so they can report status), which means the
home alone cannot tell a primary from a crew: the question is asked about the *project
directory* the harness runs in. The rule, first match wins:

1. ``FM_CREW`` or ``FM_TASK_ID`` is set (non-empty): a crew or scout launched by Firstmate.
   Not a primary.
2. The home has no ``state/`` directory: nothing was ever supervised here. Not a primary.
3. Walking up from the project directory (the payload's ``cwd``, else ``FM_PROJECT_DIR``,
   else the project-directory variables the calling harness declares
   (``HarnessInfo.project_env``), else the current directory) to the top of its git checkout,
   in each directory:

   * a valid ``.fm-primary`` marker (a regular file, not a symlink, whose first line is an
     identifier ``[A-Za-z0-9._-]+``) makes it a primary even inside a linked worktree (a
     secondary captain's home kept in a worktree opts in this way);
   * a ``.fm-crew`` entry (any kind) marks a crew or scout worktree: not a primary;
   * a ``.git`` *directory* is the main working tree: a primary;
   * a ``.git`` *file* whose ``gitdir:`` points into ``…/worktrees/…`` is a linked worktree
     (crews and scouts work in those): not a primary. Any other ``.git`` file (a submodule)
     counts as a primary checkout.

4. No git checkout above the project directory at all: a primary (a home need not be a repo).

Only ``lstat``/small reads: no ``git`` binary, no subprocess, nothing written.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from firstmate.base.quickgate import CREW_ENV
from firstmate.store.home import Home

#: Core's own project-directory variable; harnesses add theirs (``HarnessInfo.project_env``).
PROJECT_ENV = ("FM_PROJECT_DIR",)
#: Harness project-directory variable names, or a callable producing them only when needed
#: (a caller that does not know its harness pays for finding them only if it gets that far).
ProjectEnv = Iterable[str] | Callable[[], Iterable[str]]
CREW_MARKER = ".fm-crew"
PRIMARY_MARKER = ".fm-primary"
#: Directories walked up at most (a deeper tree is treated as "no checkout found").
MAX_DEPTH = 64
_IDENT = re.compile(r"[A-Za-z0-9._-]+")


@attrs.frozen
class Scope:
    """The verdict, with the reason in words (for diagnostics and tests)."""

    primary: bool
    reason: str
    project: str = ""


def project_dir(payload: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
                cwd: str | None = None, *, project_env: ProjectEnv = ()) -> Path:
    """The directory the harness runs in (see the module docstring for the order);
    *project_env* names the calling harness's own project-directory variables."""
    env = os.environ if env is None else env
    if payload is not None:
        value = payload.get("cwd")
        if isinstance(value, str) and _usable_path(value):
            return Path(value)
    for names in (PROJECT_ENV, project_env):
        for name in names() if callable(names) else names:
            value = env.get(name, "").strip()
            if value and _usable_path(value):
                return Path(value)
    try:
        return Path(cwd or os.getcwd())
    except OSError:
        return Path("/")


def _usable_path(value: str) -> bool:
    """An absolute path the OS can take: no NUL, no lone surrogate (a hostile or broken
    payload's ``cwd`` is passed over, never allowed to crash the hook)."""
    if "\0" in value or not os.path.isabs(value):
        return False
    try:
        os.fsencode(value)
    except UnicodeEncodeError:
        return False
    return True


def _marker_valid(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    try:
        with open(path, "rb") as fh:
            first = fh.read(256).split(b"\n", 1)[0].decode("ascii", "replace").strip()
    except OSError:
        return False
    return _IDENT.fullmatch(first) is not None


def _git_file_kind(path: Path) -> str:
    """``linked`` for a linked worktree's ``.git`` file, else ``other``."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(4096).decode("utf-8", "replace")
    except OSError:
        return "other"
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            target = line[len("gitdir:"):].strip().replace("\\", "/")
            if "/worktrees/" in f"/{target}/":
                return "linked"
    return "other"


def classify_dir(start: Path) -> Scope:
    """Rule 3 and 4 alone: what the checkout around *start* says."""
    current = Path(os.path.abspath(start))
    for _ in range(MAX_DEPTH):
        if _marker_valid(current / PRIMARY_MARKER):
            return Scope(True, f"primary marker {current / PRIMARY_MARKER}", str(start))
        if os.path.lexists(current / CREW_MARKER):
            return Scope(False, f"crew marker {current / CREW_MARKER}", str(start))
        git = current / ".git"
        try:
            mode = os.lstat(git).st_mode
        except OSError:
            mode = 0
        if stat.S_ISDIR(mode):
            return Scope(True, f"main checkout {current}", str(start))
        if stat.S_ISREG(mode):
            if _git_file_kind(git) == "linked":
                return Scope(False, f"linked git worktree {current}", str(start))
            return Scope(True, f"checkout {current}", str(start))
        if current.parent == current:
            break
        current = current.parent
    return Scope(True, "not inside a git checkout", str(start))


def primary_scope(home: Home, payload: Mapping[str, Any] | None = None,
                  env: Mapping[str, str] | None = None, cwd: str | None = None, *,
                  project_env: ProjectEnv = ()) -> Scope:
    """Whether the caller is a genuine primary of *home* (see the module docstring);
    *project_env* as for :func:`project_dir`."""
    env = os.environ if env is None else env
    for name in CREW_ENV:
        value = env.get(name, "").strip()
        if value:
            return Scope(False, f"crew environment ({name} is set)")
    if not home.state.is_dir():
        return Scope(False, f"no state directory at {home.state}")
    return classify_dir(project_dir(payload, env, cwd, project_env=project_env))


__all__ = ["CREW_ENV", "CREW_MARKER", "PRIMARY_MARKER", "PROJECT_ENV", "ProjectEnv", "Scope",
           "classify_dir", "primary_scope", "project_dir"]
