"""Find the home directory with nothing but ``os`` (the hook fast path cannot afford more).

:func:`firstmate.store.home.resolve_root` is this function wrapped in a ``Path``.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

HOME_MARKER = ".firstmate"


def find_root(env: Mapping[str, str], cwd: str | None = None) -> str:
    """``FM_HOME``, else the nearest ``.firstmate/`` at or above *cwd* that this user owns (one
    owned by anyone else is passed over, never adopted), else ``~/.firstmate``; always
    absolute, and verified safe to act on (:func:`firstmate.base.trust.verify_home`, exit 4)."""
    from firstmate.base.trust import verify_home

    root = _locate(env, cwd)
    verify_home(root)
    return root


def created_line(root: str, env: Mapping[str, str], cwd: str | None = None) -> str:
    """The one line that says this command made a new home at *root*, and why it is there (a
    mistyped ``FM_HOME`` must not go unnoticed)."""
    explicit = env.get("FM_HOME", "").strip()
    here = os.path.abspath(cwd if cwd is not None else os.getcwd())
    if explicit:
        why, fix = f"FM_HOME={explicit}", "if you meant an existing home, correct FM_HOME"
    elif root == os.path.join(os.path.expanduser("~"), HOME_MARKER):
        why = f"FM_HOME is not set and no {HOME_MARKER}/ of yours is at or above {here}"
        fix = "set FM_HOME to use another home"
    else:
        why, fix = f"the nearest {HOME_MARKER}/ at or above {here}", "set FM_HOME to use another home"
    line = f"fm: created a new home at {root} ({why}); {fix}"
    return "".join(c if c.isprintable() else "?" for c in line)


def announce_created(root: str, env: Mapping[str, str], cwd: str | None = None) -> None:
    """Write :func:`created_line` to stderr; a closed stderr never fails the command."""
    import sys

    try:
        sys.stderr.write(created_line(root, env, cwd) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def _locate(env: Mapping[str, str], cwd: str | None) -> str:
    from firstmate.base.trust import adoptable

    explicit = env.get("FM_HOME", "").strip()
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    here = os.path.abspath(cwd if cwd is not None else os.getcwd())
    while True:
        marker = os.path.join(here, HOME_MARKER)
        if adoptable(marker):
            return marker
        parent = os.path.dirname(here)
        if parent == here:
            return os.path.join(os.path.expanduser("~"), HOME_MARKER)
        here = parent
