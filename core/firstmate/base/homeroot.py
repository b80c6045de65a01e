"""Find the home directory with nothing but ``os`` (the hook fast path cannot afford more).

Which home, in order:

1. ``FM_HOME`` (``env``): the home you named.
2. The nearest ``.firstmate/`` at or above the current directory that this user owns (``found``;
   one owned by anyone else is passed over, never adopted). A project's own home sits at its
   root (``fm install`` puts it there), so every directory of the project finds it.
3. In a linked worktree (``git worktree add``, ``fm crew spawn --worktree``) with no home of its
   own: the ``.firstmate/`` at the root of the project's main worktree (``project``), read from
   ``.git`` without running git (:mod:`firstmate.base.gitroot`).
4. ``~/.firstmate`` (``default``).

A home is then verified safe to act on (:func:`firstmate.base.trust.verify_home`, exit 4), an
empty ``.firstmate/`` you made is set up as a new home, and a ``state/`` fm finds by walking up counts
only with its mark (:mod:`firstmate.base.homemark`): one carried in by a copy or clone of the
project is refused, naming the fix. A home you named, and the default one, are yours by your
word: their ``state/`` is marked as it is used (older fm made no marks).

:func:`firstmate.store.home.resolve_root` is :func:`find_root` wrapped in a ``Path``.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

HOME_MARKER = ".firstmate"
#: How a home was chosen (``fm status`` says which, and why).
SOURCES = ("env", "found", "project", "default")


def default_root() -> str:
    return os.path.join(os.path.expanduser("~"), HOME_MARKER)


def locate(env: Mapping[str, str], cwd: str | None = None) -> tuple[str, str, str]:
    """``(root, source, where)``: the home's absolute path, one of :data:`SOURCES`, and the
    directory that decided it (``FM_HOME``'s value, the directory holding the ``.firstmate/``,
    the main worktree's root, or the directory the search started from). Reads only."""
    from firstmate.base.trust import adoptable

    explicit = env.get("FM_HOME", "").strip()
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit)), "env", explicit
    start = os.path.abspath(cwd if cwd is not None else os.getcwd())
    default = default_root()
    here = start
    looking_for_git = True
    while True:
        marker = os.path.join(here, HOME_MARKER)
        if adoptable(marker):
            return marker, ("default" if marker == default else "found"), here
        if looking_for_git and os.path.lexists(os.path.join(here, ".git")):
            looking_for_git = False  # the worktree's root: only the nearest one counts
            from firstmate.base.gitroot import linked_main_root

            main = linked_main_root(here)
            if main is not None:
                marker = os.path.join(main, HOME_MARKER)
                if adoptable(marker):
                    return marker, "project", main
        parent = os.path.dirname(here)
        if parent == here:
            return default, "default", start
        here = parent


def find_home(env: Mapping[str, str], cwd: str | None = None, *,
              adopt: bool = True) -> tuple[str, str, str]:
    """:func:`locate`, verified safe to act on: ``(root, source, where)``. An empty
    ``.firstmate/`` of yours found in the project is set up as a new home (said on stderr;
    not with *adopt* False: a harness's hook never makes a home); a
    ``state/`` without this machine's mark
    is marked when the home is yours by your word (``env``, ``default``) or holds nothing yet,
    and refused otherwise (:class:`~firstmate.base.errors.StateError`, exit 4)."""
    from firstmate.base.trust import verify_home

    root, source, where = locate(env, cwd)
    shape = verify_home(root)
    if shape == "bare":
        # A .firstmate/ you made in a project is the home you asked for. (An empty FM_HOME
        # is filled by the first command that needs state; one that only looks creates none.)
        if adopt and source in ("found", "project") and _empty(root):
            from firstmate.base.homemark import ensure_home

            if ensure_home(root, env):
                announce_created(root, env, cwd)
    elif shape == "state":
        settle(root, source, env)
    return root, source, where


def find_root(env: Mapping[str, str], cwd: str | None = None, *, adopt: bool = True) -> str:
    """The home's root (see :func:`find_home`): always absolute, verified, and its ``state/``
    this user's (exit 4 naming the fix otherwise)."""
    return find_home(env, cwd, adopt=adopt)[0]


def settle(root: str, source: str, env: Mapping[str, str]) -> None:
    """Let the existing ``state/`` of the home at *root* count, or refuse it (see the module
    docstring)."""
    from firstmate.base import homemark

    verdict = homemark.verdict(root, env)
    if verdict == "ok":
        return
    if source in ("env", "default") or homemark.vacant(root):
        homemark.write(root, env)
        return
    raise foreign_error(root, verdict)


def foreign_error(root: str, verdict: str = "missing") -> Exception:
    """The refusal of a ``state/`` this user's fm did not make here, naming both fixes."""
    import shlex

    from firstmate.base.errors import StateError

    state = os.path.join(root, "state")
    why = ("carries no mark of your fm on this machine" if verdict == "missing" else
           "carries a mark made elsewhere or for another path")
    line = (f"{state} {why} (it came with a copy or clone of the project, or the home was "
            "moved), so fm will not act on it; if it is yours, adopt it once with: "
            f"FM_HOME={shlex.quote(root)} fm status; otherwise set it aside: "
            f"mv {shlex.quote(state)} {shlex.quote(state + '.foreign')}")
    return StateError(_printable(line))


def reason(root: str, source: str, where: str) -> str:
    """Why this home, in a few words (``fm status``)."""
    if source == "env":
        return "FM_HOME"
    if source == "found":
        return f"found at {where}, the nearest {HOME_MARKER}/ at or above the current directory"
    if source == "project":
        return f"the project root {where}: this directory is in one of its linked worktrees"
    return f"default: no project's {HOME_MARKER}/ of yours at or above the current directory"


def _empty(root: str) -> bool:
    try:
        with os.scandir(root) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def _printable(line: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in line)


def _say(line: str) -> None:
    import sys

    try:
        sys.stderr.write(_printable(line) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def created_line(root: str, env: Mapping[str, str], cwd: str | None = None) -> str:
    """The one line that says this command made a new home at *root*, and why it is there (a
    mistyped ``FM_HOME`` must not go unnoticed)."""
    explicit = env.get("FM_HOME", "").strip()
    here = os.path.abspath(cwd if cwd is not None else os.getcwd())
    if explicit:
        why, fix = f"FM_HOME={explicit}", "if you meant an existing home, correct FM_HOME"
    elif root == default_root():
        why = f"FM_HOME is not set and no {HOME_MARKER}/ of yours is at or above {here}"
        fix = "set FM_HOME to use another home"
    else:
        why, fix = f"the nearest {HOME_MARKER}/ at or above {here}", "set FM_HOME to use another home"
    return _printable(f"fm: created a new home at {root} ({why}); {fix}")


def announce_created(root: str, env: Mapping[str, str], cwd: str | None = None) -> None:
    """Write :func:`created_line` to stderr; a closed stderr never fails the command."""
    _say(created_line(root, env, cwd))


__all__ = ["HOME_MARKER", "SOURCES", "announce_created", "created_line", "default_root",
           "find_home", "find_root", "foreign_error", "locate", "reason", "settle"]
