"""Keep fm's own files in a git project out of git, without touching a file the project commits.

``fm install`` puts a project's home at its root and writes harness files that name this
machine's paths; none of them may show up in ``git status`` or be committed by ``git add -A``.
They are listed in the repository's own ``info/exclude`` (shared by every worktree, never
committed), inside one marked block:

    # firstmate: begin (fm install keeps these out of git; fm uninstall removes its lines)
    /.firstmate/
    /.claude/settings.local.json
    # firstmate: end

A tracked ``.gitignore`` is never changed. Every edit goes through
:mod:`firstmate.plugin.filestage`, so it lands with the install's other files or not at all.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from firstmate.base import gitroot
from firstmate.plugin import filestage

BEGIN = "# firstmate: begin (fm install keeps these out of git; fm uninstall removes its lines)"
END = "# firstmate: end"
#: Characters a gitignore pattern treats specially, escaped in the paths fm lists.
_SPECIAL = "\\*?[ !#"


def exclude_file(worktree: str) -> Path | None:
    """The ``info/exclude`` of the repository whose worktree root is *worktree*, or None."""
    common = gitroot.common_dir(worktree)
    return None if common is None else Path(common) / "info" / "exclude"


def pattern(worktree: str, path: Path, *, directory: bool = False) -> str | None:
    """The anchored pattern that matches exactly *path* in *worktree* (None: not inside it)."""
    rel = os.path.relpath(os.path.abspath(path), worktree)
    if rel == "." or rel.startswith(".." + os.sep) or rel == "..":
        return None
    escaped = "".join("\\" + c if c in _SPECIAL else c for c in rel.replace(os.sep, "/"))
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return "/" + escaped + ("/" if directory else "")


#: The largest ``info/exclude`` fm edits (it rewrites the whole file, so never a partial read).
READ_LIMIT = 8 << 20


def _read(file: Path) -> str:
    data = filestage.read(file, READ_LIMIT + 1)
    if data is not None and len(data) > READ_LIMIT:
        from firstmate.base.errors import FirstmateError

        raise FirstmateError(f"{file} is larger than {READ_LIMIT >> 20} MiB, so fm will not "
                             "rewrite it; shorten it and rerun")
    return "" if data is None else data.decode("utf-8", "surrogateescape")


def listed(file: Path) -> list[str]:
    """The patterns in fm's block of *file*."""
    lines = _read(file).splitlines()
    if BEGIN not in lines:
        return []
    start = lines.index(BEGIN) + 1
    end = lines.index(END, start) if END in lines[start:] else len(lines)
    return [line for line in lines[start:end] if line.strip()]


def update(file: Path, add: Iterable[str] = (), drop: Iterable[str] = (), *,
           dry_run: bool = False) -> bool:
    """Add *add* to fm's block of *file* and take *drop* out of it (the block goes when it is
    empty; the rest of the file is kept byte for byte). True when the file would change."""
    text = _read(file)
    lines = text.splitlines()
    had = BEGIN in lines
    current = listed(file)
    wanted = [p for p in current if p not in set(drop)]
    wanted += [p for p in dict.fromkeys(add) if p not in wanted]
    if wanted == current:
        return False
    if had:
        start = lines.index(BEGIN)
        end = lines.index(END, start + 1) + 1 if END in lines[start + 1:] else len(lines)
        before, after = lines[:start], lines[end:]
    else:
        before, after = lines, []
    block = [BEGIN, *wanted, END] if wanted else []
    if not had and block and before and before[-1].strip():
        block.insert(0, "")
    if had and not block and before and not before[-1].strip() and not after:
        before = before[:-1]  # the blank line fm put before its block
    out = before + block + after
    new = ("\n".join(out) + "\n") if out else ""
    if dry_run:
        return True
    data = new.encode("utf-8", "surrogateescape")
    if not data and not text:
        return True
    filestage.write(file, data)
    return True


def tracked(worktree: str, paths: Sequence[Path]) -> set[Path]:
    """Which of *paths* git tracks in *worktree* (none when git cannot say: a missing ``git``
    leaves fm's own rules to decide)."""
    if not paths:
        return set()
    rels = [os.path.relpath(os.path.abspath(p), worktree) for p in paths]
    try:
        done = subprocess.run(["git", "-C", worktree, "ls-files", "-z", "--", *rels],
                              capture_output=True, timeout=30, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return set()
    if done.returncode != 0:
        return set()
    names = {name.decode("utf-8", "surrogateescape") for name in done.stdout.split(b"\0") if name}
    found: set[Path] = set()
    for path, rel in zip(paths, rels, strict=True):
        if rel.replace(os.sep, "/") in names or any(n.startswith(rel.replace(os.sep, "/") + "/")
                                                     for n in names):
            found.add(path)
    return found


__all__ = ["BEGIN", "END", "exclude_file", "listed", "pattern", "tracked", "update"]
