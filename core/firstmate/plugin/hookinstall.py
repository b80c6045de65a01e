"""Install and remove a hook harness's entries (Claude Code, Cursor, Codex, Grok) from one spec.

A :class:`HookInstallSpec` says which JSON file the harness reads its hooks from, the file's
shape, our handler per event and the text blocks (a protocol in ``AGENTS.md``, a rules file)
that go with them. :func:`install`, :func:`uninstall` and :func:`check` all derive from it, so
the three can never disagree about what "installed" means. Every merge goes through
:mod:`firstmate.plugin.configfiles`: idempotent, the user's entries and bytes kept, a backup on the
first change, nothing written on a dry run.
"""

from __future__ import annotations

import copy
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

    def handler(self, options: InstallOptions, shape: str) -> dict[str, Any]:
        command = hook_command(options, self.event)
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

    def config_files(self) -> tuple[str, ...]:
        """The project-relative files an install merges into (``HarnessInfo.config_files``)."""
        return (self.path, *(block.path for block in self.blocks))

    def handlers(self, options: InstallOptions) -> dict[str, dict[str, Any]]:
        """Our handler per harness event, as an install writes it."""
        return {event.harness_event: event.handler(options, self.shape) for event in self.events}

    def owned(self) -> Callable[[Any], bool]:
        return command_owner(self.harness)

    def add(self, options: InstallOptions, notes: list[str]) -> Callable[[JsonDoc], JsonDoc]:
        """The install transform of the hooks document; appends to *notes* what it had to fix."""
        owned = self.owned()
        wanted = [(event, event.handler(options, self.shape)) for event in self.events]

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

    def remove(self, doc: JsonDoc) -> JsonDoc:
        """The hooks document without any handler of ours."""
        if self.shape == GROUPED:
            return remove_grouped_hooks(doc, self.owned())
        return remove_flat_hooks(doc, self.owned())


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


def install(spec: HookInstallSpec, options: InstallOptions) -> InstallResult:
    """``fm install <harness>``: our handlers and blocks merged in (idempotent)."""
    require_project(options)
    notes: list[str] = []
    with filestage.transaction():  # the hooks and their protocol blocks, or none of them
        hooks = update_json(options.project / spec.path, spec.add(options, notes),
                            remove_ours=spec.remove, skeleton=spec.skeleton,
                            dry_run=options.dry_run)
        changes = [hooks, *(_block_change(b, options, removing=False) for b in spec.blocks)]
    if hooks.action != "unchanged":
        notes.extend(spec.notes)
    notes.extend(spec.standing_notes)
    return install_result(spec.harness, changes, notes, options.dry_run)


def uninstall(spec: HookInstallSpec, options: InstallOptions) -> InstallResult:
    """``fm uninstall <harness>``: exactly our handlers and blocks taken out; a file left with
    nothing of the user's is deleted with the directories we made for it."""
    require_project(options)
    with filestage.transaction():
        hooks = update_json(options.project / spec.path, spec.remove, remove_ours=spec.remove,
                            skeleton=spec.skeleton, dry_run=options.dry_run,
                            delete_if_vacant=True, prune_upto=_prune_root(options, spec.path))
        changes = [hooks, *(_block_change(b, options, removing=True) for b in spec.blocks)]
    return install_result(spec.harness, changes, (), options.dry_run)


def check(spec: HookInstallSpec, options: InstallOptions) -> tuple[FileChange, ...]:
    """The files an install would still change (none: installed and current). Writes nothing."""
    return install(spec, attrs.evolve(options, dry_run=True)).stale


__all__ = ["FLAT", "GROUPED", "SHAPES", "HookEvent", "HookInstallSpec", "TextBlock", "check",
           "install", "uninstall"]
