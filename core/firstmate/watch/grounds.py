"""Where the watcher stands: its own code (refused in a disposable checkout) and its grounds.

The grounds are the home, its ``state/``, the watcher's code directory and the database file its
cycle opened; a watcher whose ground is gone ends its cycle (docs/watcher.md, *Each poll*).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from firstmate.store.home import Home

DISPOSABLE_MARKER = "/.no-mistakes/worktrees/"


def code_dir() -> Path:
    """The directory of the running ``firstmate`` package (the watcher's own code)."""
    import firstmate

    return Path(os.path.abspath(os.path.dirname(firstmate.__file__)))


def disposable_checkout(code: Path, env: Mapping[str, str]) -> Path | None:
    """*code* (logical or physical) when it lies in a disposable checkout, else None.

    A disposable checkout is one whose path contains ``/.no-mistakes/worktrees/`` or matches a
    glob of the colon-separated ``FM_DISPOSABLE_PATTERNS``. ``FM_GATE_REFUSE_BYPASS=1`` lifts the
    refusal (for tests of the refusal's neighbours).
    """
    if env.get("FM_GATE_REFUSE_BYPASS", "").strip() == "1":
        return None
    patterns = [p for p in env.get("FM_DISPOSABLE_PATTERNS", "").split(":") if p.strip()]
    for candidate in (Path(os.path.abspath(code)), Path(os.path.realpath(code))):
        text = str(candidate)
        if DISPOSABLE_MARKER in text + "/":
            return candidate
        for pattern in patterns:
            if fnmatch.fnmatchcase(text, pattern) or fnmatch.fnmatchcase(text + "/", pattern):
                return candidate
    return None


def file_id(path: str | Path) -> tuple[int, int] | None:
    """(device, inode) of the file at *path*, followed through symlinks; None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def missing_ground(home: Home, code: Path | None = None) -> Path | None:
    """The first of home, state dir and code dir that no longer exists, else None."""
    for path in (home.root, home.state, code_dir() if code is None else code):
        if not os.path.isdir(path):
            return path
    return None


__all__ = ["DISPOSABLE_MARKER", "code_dir", "disposable_checkout", "file_id", "missing_ground"]
