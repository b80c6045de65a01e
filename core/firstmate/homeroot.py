"""Find the home directory with nothing but ``os`` (the hook fast path cannot afford more).

:func:`firstmate.home.resolve_root` is this function wrapped in a ``Path``.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

HOME_MARKER = ".firstmate"


def find_root(env: Mapping[str, str], cwd: str | None = None) -> str:
    """``FM_HOME``, else the nearest ``.firstmate/`` (not a symlink) at or above *cwd*, else
    ``~/.firstmate``; always absolute."""
    explicit = env.get("FM_HOME", "").strip()
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    here = os.path.abspath(cwd if cwd is not None else os.getcwd())
    while True:
        marker = os.path.join(here, HOME_MARKER)
        if os.path.isdir(marker) and not os.path.islink(marker):
            return marker
        parent = os.path.dirname(here)
        if parent == here:
            return os.path.join(os.path.expanduser("~"), HOME_MARKER)
        here = parent
