"""Install and remove a hook harness's entries (Claude Code, Cursor, Codex, Grok) from one spec.

A :class:`HookInstallSpec` says which JSON file the harness reads its hooks from, the file's
shape, our handler per event and the text blocks (a protocol in ``AGENTS.md``, a rules file)
that go with them. :func:`install`, :func:`uninstall` and :func:`check` all derive from it, so
the three can never disagree about what "installed" means. Every merge goes through
:mod:`firstmate.plugin.configfiles`: idempotent, the user's entries and bytes kept, what was
there kept in the home, nothing written on a dry run.

Hook commands name this machine's paths (fm's own entry point), so they never go into a file a
project commits. The spec's hooks file is one the harness keeps per person (Claude Code's
``.claude/settings.local.json``) or one that is fm's alone; a harness whose only project hooks
file is the one a team shares (Cursor, Codex) declares its user-level file
(:class:`UserFile`): in a git project the hooks go there, one entry per project, each answering
only for sessions in that project (``fm hook … --project DIR``). Hooks an older fm wrote into a
file the project commits (:attr:`HookInstallSpec.legacy`) are moved by the next install.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from firstmate.plugin import filestage
from firstmate.plugin.configfiles import (
    BLOCK_NAME,
    JsonDoc,
    command_owner,
    hook_command,
    install_result,
    remove_block,
    remove_flat_hooks,
    remove_grouped_hooks,
    require_project,
    update_json,
    update_text,
    upsert_block,
    upsert_flat_hook,
    upsert_grouped_hook,
)
from firstmate.plugin.harness import FileChange, InstallOptions, InstallResult, read_only

#: ``{"hooks": {Event: [{"matcher"?, "hooks": [handler…]}]}}`` (Claude Code, Codex, Grok).
GROUPED = "grouped"
#: ``{"hooks": {event: [handler…]}}`` (Cursor).
FLAT = "flat"
SHAPES = (GROUPED, FLAT)


@attrs.frozen
class HookEvent:
    """Our handler for one event of the harness."""

    #: The event as the harness spells it in its config file (``Stop``, ``sessionStart``).
    harness_event: str
    #: Ours, in kebab case: the ``<event>`` of ``fm hook <harness> <event>``.
    event: str
    #: Handler keys after ``command``, in the order they are written (``timeout``, ``asyncRewake``…).
    options: Mapping[str, Any] = attrs.field(factory=dict, converter=read_only, hash=False)
    #: The group's ``matcher`` (grouped shape only); None writes no matcher.
    matcher: str | None = None
    #: ``VAR=value`` words the command runs with, through ``env`` (``env VAR=value fm hook …``).
    env: tuple[str, ...] = ()

    def handler(self, options: InstallOptions, shape: str,
                project: Path | None = None) -> dict[str, Any]:
        command = hook_command(options, self.event, project=project)
        if self.env:
            command = " ".join(("env", *self.env, command))
        # The grouped shape names the handler type first; Cursor's flat handlers have none.
        head: dict[str, Any] = {"type": "command"} if shape == GROUPED else {}
        return {**head, "command": command, **copy.deepcopy(dict(self.options))}


@attrs.frozen
class TextBlock:
    """A marked block (``<!-- name:begin -->`` … ``<!-- name:end -->``) we keep in a text file."""

    #: Project-relative file.
    path: str
    body: str
    name: str = BLOCK_NAME


def _event_tuple(value: Any) -> tuple[HookEvent, ...]:
    return tuple(value)


@attrs.frozen
class UserFile:
    """A harness's user-level hooks file: ``$<env>/<name>`` when the variable *env* is set,
    else ``~/<directory>/<name>``."""

    directory: str
    name: str
    env: str = ""

    def path(self, environ: Mapping[str, str] | None = None) -> Path:
        environ = os.environ if environ is None else environ
        base = environ.get(self.env, "").strip() if self.env else ""
        folder = base or os.path.join(os.path.expanduser("~"), self.directory)
        return Path(os.path.abspath(folder)) / self.name


def in_git(project: Path) -> bool:
    """Whether *project* is inside a git worktree (what it commits matters)."""
    from firstmate.base.gitroot import worktree_root

    return worktree_root(str(project)) is not None


def personal(command: str) -> bool:
    """Whether a hook command names a path of this machine (an absolute word)."""
    import shlex

    try:
        return any(os.path.isabs(word) for word in shlex.split(command))
    except ValueError:
        return True


@attrs.frozen
class HookInstallSpec:
    """Everything ``fm install <harness>`` writes for a hook harness, as data."""

    harness: str
    #: Project-relative JSON file the harness reads its hooks from.
    path: str
    #: :data:`GROUPED` or :data:`FLAT`.
    shape: str = attrs.field(validator=attrs.validators.in_(SHAPES))
    events: tuple[HookEvent, ...] = attrs.field(converter=_event_tuple)
    #: What a new hooks file starts as; a file holding only this (and empty containers) is vacant.
    skeleton: Mapping[str, Any] = attrs.field(factory=dict, converter=read_only, hash=False)
    #: Top-level keys the harness needs in the file (Cursor ignores a hooks file without
    #: ``"version": 1``): added to an existing file that lacks them.
    required: Mapping[str, Any] = attrs.field(factory=dict, converter=read_only, hash=False)
    #: Said when :attr:`required` keys were added to a file that already held hooks.
    required_note: str = ""
    blocks: tuple[TextBlock, ...] = ()
    #: Said after an install that changed the hooks file.
    notes: tuple[str, ...] = ()
    #: Said after every install (what to run next, whatever changed).
    standing_notes: tuple[str, ...] = ()
    #: Project-relative files older fm versions wrote these hooks into (files the project
    #: commits): an install moves our entries out of them, an uninstall removes them there too.
    legacy: tuple[str, ...] = ()
    #: The harness's user-level hooks file, used instead of :attr:`path` in a git project (the
    #: project's own hooks file is the one the team shares): see the module docstring.
    user_file: UserFile | None = None

    def config_files(self) -> tuple[str, ...]:
        """The project-relative files an install merges into (``HarnessInfo.config_files``)."""
        return (self.path, *(block.path for block in self.blocks))

    def user_scope(self, options: InstallOptions) -> bool:
        """Whether this install goes into the user-level file (see :attr:`user_file`)."""
        return self.user_file is not None and in_git(options.project)

    def hooks_file(self, options: InstallOptions) -> Path:
        """Where this install's hooks go."""
        if self.user_file is not None and self.user_scope(options):
            return self.user_file.path()
        return options.project / self.path

    def _project(self, options: InstallOptions) -> Path | None:
        """The ``--project`` our handlers name (user scope only)."""
        return options.project if self.user_scope(options) else None

    def handlers(self, options: InstallOptions) -> dict[str, dict[str, Any]]:
        """Our handler per harness event, as an install writes it."""
        project = self._project(options)
        return {event.harness_event: event.handler(options, self.shape, project)
                for event in self.events}

    def owned(self, project: Path | None = None) -> Callable[[Any], bool]:
        return command_owner(self.harness, project)

    def add(self, options: InstallOptions, notes: list[str]) -> Callable[[JsonDoc], JsonDoc]:
        """The install transform of the hooks document; appends to *notes* what it had to fix."""
        project = self._project(options)
        owned = self.owned(project)
        wanted = [(event, event.handler(options, self.shape, project)) for event in self.events]

        def transform(doc: JsonDoc) -> JsonDoc:
            missing = [key for key in self.required if key not in doc]
            for key in missing:
                doc[key] = copy.deepcopy(self.required[key])
            if missing and doc.get("hooks") and self.required_note:
                notes.append(self.required_note)
            for event, handler in wanted:
                if self.shape == GROUPED:
                    upsert_grouped_hook(doc, event.harness_event, handler, owned, event.matcher)
                else:
                    upsert_flat_hook(doc, event.harness_event, handler, owned)
            return doc

        return transform

    def remover(self, project: Path | None = None) -> Callable[[JsonDoc], JsonDoc]:
        """The hooks document without any handler of ours (for *project*, in a user-level
        file)."""
        owned = self.owned(project)

        def remove(doc: JsonDoc) -> JsonDoc:
            if self.shape == GROUPED:
                return remove_grouped_hooks(doc, owned)
            return remove_flat_hooks(doc, owned)

        return remove

    def remove(self, doc: JsonDoc) -> JsonDoc:
        """The hooks document without any handler of ours (a project's own file)."""
        return self.remover()(doc)

    def stale_files(self, options: InstallOptions) -> tuple[Path, ...]:
        """Files an older install may have left our hooks in, besides :meth:`hooks_file`."""
        files = [options.project / rel for rel in self.legacy]
        if self.user_scope(options):
            files.append(options.project / self.path)
        return tuple(f for f in files if f != self.hooks_file(options))


def _prune_root(options: InstallOptions, relative: str) -> Path | None:
    # Directories we created for a file are removed again when empty; a file at the top of the
    # project has none (and the project itself is never removed).
    return options.project if "/" in relative else None


def _block_change(block: TextBlock, options: InstallOptions, *, removing: bool) -> FileChange:
    def strip(text: str) -> str:
        return remove_block(text, block.name)

    if removing:
        return update_text(options.project / block.path, strip, remove_ours=strip,
                           dry_run=options.dry_run, delete_if_vacant=True,
                           prune_upto=_prune_root(options, block.path))
    return update_text(options.project / block.path,
                       lambda text: upsert_block(text, block.body, block.name),
                       remove_ours=strip, dry_run=options.dry_run)


def _hooks_change(spec: HookInstallSpec, options: InstallOptions, *, removing: bool,
                  notes: list[str] | None = None) -> FileChange:
    path = spec.hooks_file(options)
    project = spec._project(options)
    user = project is not None
    if removing:
        return update_json(path, spec.remover(project), remove_ours=spec.remover(project),
                           skeleton=spec.skeleton, dry_run=options.dry_run, delete_if_vacant=True,
                           prune_upto=None if user else _prune_root(options, spec.path))
    return update_json(path, spec.add(options, [] if notes is None else notes),
                       remove_ours=spec.remover(project), skeleton=spec.skeleton,
                       dry_run=options.dry_run,
                       personal=any(personal(h["command"]) for h in spec.handlers(options).values()))


def _stale_changes(spec: HookInstallSpec, options: InstallOptions) -> list[FileChange]:
    """Our entries taken out of the files an older install left them in."""
    changes = []
    for path in spec.stale_files(options):
        rel = os.path.relpath(path, options.project)
        changes.append(update_json(path, spec.remove, remove_ours=spec.remove,
                                   skeleton=spec.skeleton, dry_run=options.dry_run,
                                   delete_if_vacant=True,
                                   prune_upto=_prune_root(options, rel)))
    return changes


def install(spec: HookInstallSpec, options: InstallOptions) -> InstallResult:
    """``fm install <harness>``: our handlers and blocks merged in (idempotent); hooks an older
    install left in a file the project commits are moved."""
    require_project(options)
    notes: list[str] = []
    with filestage.transaction():  # the hooks and their protocol blocks, or none of them
        hooks = _hooks_change(spec, options, removing=False, notes=notes)
        moved = [c for c in _stale_changes(spec, options) if c.action != "unchanged"]
        changes = [hooks, *moved,
                   *(_block_change(b, options, removing=False) for b in spec.blocks)]
    if hooks.action != "unchanged":
        notes.extend(spec.notes)
        if spec.user_scope(options):
            notes.append(f"the hooks are in {hooks.path}, your own file, and answer only for "
                         f"this project: {spec.path} is the one a team commits, so fm leaves it "
                         "alone")
    for change in moved:
        notes.append(f"moved Firstmate's hooks out of {_shown(change.path, options)}, a file the "
                     f"project shares, into {_shown(hooks.path, options)}")
    notes.extend(spec.standing_notes)
    return install_result(spec.harness, changes, notes, options.dry_run)


def _shown(path: Path, options: InstallOptions) -> str:
    try:
        return str(path.relative_to(options.project))
    except ValueError:
        return str(path)


def uninstall(spec: HookInstallSpec, options: InstallOptions) -> InstallResult:
    """``fm uninstall <harness>``: exactly our handlers and blocks taken out, wherever an
    install put them; a file fm left untouched is put back as it was."""
    require_project(options)
    with filestage.transaction():
        hooks = _hooks_change(spec, options, removing=True)
        changes = [hooks, *_stale_changes(spec, options),
                   *(_block_change(b, options, removing=True) for b in spec.blocks)]
    return install_result(spec.harness, changes, (), options.dry_run)


def check(spec: HookInstallSpec, options: InstallOptions) -> tuple[FileChange, ...]:
    """The files an install would still change (none: installed and current). Writes nothing."""
    return install(spec, attrs.evolve(options, dry_run=True)).stale


__all__ = ["FLAT", "GROUPED", "SHAPES", "HookEvent", "HookInstallSpec", "TextBlock", "UserFile",
           "check", "in_git", "install", "personal", "uninstall"]
