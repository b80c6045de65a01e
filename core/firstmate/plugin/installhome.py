"""Which home ``fm install`` sets a project up with: one fleet per project.

In a git project with no home of its own, ``fm install <harness>`` makes one at the project's
root (the main worktree's, for a linked worktree): ``<root>/.firstmate``, listed in the
repository's ``info/exclude`` so git never shows or commits it, and found from every directory
and worktree of the project (:mod:`firstmate.base.homeroot`). Crews' worktrees go under it, so
two projects' crews never collide.

Otherwise the home is, in order: ``--home`` or ``FM_HOME`` (yours by your word); a
``.firstmate/`` found at or above the project (or at its main worktree's root); the project's
old home ``~/.firstmate`` when an older fm installed this project there (its install record, or
its hooks already in the project's files, say so: a running fleet is never split; the note says
how to move); ``~/.firstmate`` outside any git project.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from firstmate.base import gitroot, homeroot
from firstmate.base.errors import StateError
from firstmate.plugin.harness import InstallOptions
from firstmate.store.home import Home

if TYPE_CHECKING:
    from firstmate.plugin.manager import PluginHost


@attrs.frozen
class Choice:
    """The home an install uses, and why."""

    home: Home
    #: ``--home``, ``env``, ``found``, ``project``, ``new`` (the project's own, made now),
    #: ``legacy`` (the project's old home) or ``default``.
    source: str
    #: Lines for the user (stderr).
    notes: tuple[str, ...] = ()


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _legacy(default: Home, project: Path, root: Path, options: InstallOptions,
            host: PluginHost) -> bool:
    """Whether an older fm installed this project with the default home."""
    if not default.state.is_dir():
        return False
    from firstmate.plugin import installrecord

    folder = default.config / installrecord.FOLDER
    try:
        names = sorted(p.stem for p in folder.glob("*.json"))
    except OSError:
        names = []
    for harness in names:
        try:
            loaded = installrecord.load(default, harness)
        except StateError:
            continue
        if any(_inside(where, root) for where, _flags in loaded.records):
            return True
    probe = host.uninstall(default, attrs.evolve(options, dry_run=True, home=None))
    return probe is not None and probe.changed


def choose(options: InstallOptions, env: Mapping[str, str], host: PluginHost) -> Choice:
    """The home for this install (see the module docstring). Raises
    :class:`~firstmate.base.errors.StateError` for a home fm will not use as it is: not yours,
    tracked by git, or holding state your fm did not make (naming the fix)."""
    project = options.project
    if options.home is not None:
        root, source = str(options.home), "--home"
    else:
        root, source, _where = homeroot.locate(env, str(project))
        if source == "default":
            main = gitroot.project_root(str(project))
            default = Home(Path(root))
            if main is None:
                pass
            elif _legacy(default, project, Path(main), options, host):
                source = "legacy"
            else:
                root, source = os.path.join(main, homeroot.HOME_MARKER), "new"
    choice = Choice(Home(Path(root)), source, _notes(root, source, options))
    _verify(choice, env)
    return choice


def _notes(root: str, source: str, options: InstallOptions) -> tuple[str, ...]:
    if source != "legacy":
        return ()
    main = gitroot.project_root(str(options.project)) or str(options.project)
    own = os.path.join(main, homeroot.HOME_MARKER)
    return (f"this project keeps the home {root}, where an older fm installed it; to give it a "
            f"fleet of its own, finish or stop its crews there, then run: mkdir "
            f"{shlex.quote(own)} && fm install {options.harness}",)


def _verify(choice: Choice, env: Mapping[str, str]) -> None:
    """Refuse a home fm must not set up or use as it is."""
    from firstmate.base.trust import verify_home

    root = str(choice.home.root)
    shape = verify_home(root)
    worktree = gitroot.worktree_root(os.path.dirname(root))
    if worktree is not None and os.path.isdir(root):
        from firstmate.plugin.gitexclude import tracked

        if tracked(worktree, [Path(root)]):
            rel = os.path.relpath(root, worktree)
            raise StateError(f"git tracks files under {root}, so its state would travel with "
                             "every clone of the project; a home stays out of git: run git -C "
                             f"{shlex.quote(worktree)} rm -r --cached {shlex.quote(rel)}, "
                             "then rerun")
    if shape == "state":
        # A home named by --home or FM_HOME, or the default one, is yours by your word; one
        # found in the project counts only with your fm's mark (firstmate.base.homeroot).
        word = "env" if choice.source in ("--home", "env", "legacy", "default", "new") \
            else choice.source
        homeroot.settle(root, word, env)


def exclude_home(home: Home, *, dry_run: bool) -> bool:
    """List a home inside a git worktree in the repository's ``info/exclude`` (True when that
    changes the file)."""
    from firstmate.plugin import gitexclude

    root = str(home.root)
    worktree = gitroot.worktree_root(os.path.dirname(root))
    if worktree is None:
        return False
    file = gitexclude.exclude_file(worktree)
    pattern = gitexclude.pattern(worktree, home.root, directory=True)
    if file is None or pattern is None:
        return False
    return gitexclude.update(file, [pattern], dry_run=dry_run)


__all__ = ["Choice", "choose", "exclude_home"]
