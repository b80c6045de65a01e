"""Register ``fm mcp`` where a harness reads its MCP servers, from a spec its plugin declares.

An :class:`McpServerSpec` names the JSON or TOML file (project-relative), the object or table
in it that holds servers by name, and the entry's shape; each harness's plugin owns its own.
A TOML file (Codex, Grok) gets our table ``[<key>.firstmate]`` as a block of its own, the rest
of the file kept byte for byte (:mod:`firstmate.plugin.tomltable`). The entry is
``firstmate``, running the same absolute entry point as the hooks (``options.fm_command``) with
``mcp`` (and ``--home`` when the install pins one). It names this machine's paths, so it is
personal: written only into a file git does not track, and kept out of git; where git tracks
the file, nothing is written there and a note says how to add the server in the harness's
personal scope instead. It is registered only when this fm's environment has the MCP SDK the
server needs (``firstmate[mcp]``); otherwise a note says how to add it. Every change goes
through :mod:`firstmate.plugin.configfiles` (idempotent, the user's entries kept, nothing
written on a dry run), so doctor's dry-run install checks it like the hooks.

A harness that asks before it starts a server from a project file (Claude Code and its
``.mcp.json``) would otherwise hold its session, and so its hooks, at that question: the user
asked for the server by installing, so :class:`McpApproval` names where the install approves
``firstmate`` (a list of server names in a personal JSON file). Only a registered server is
approved, the user's own names stay, and the uninstall takes out exactly ours.
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from firstmate.plugin.configfiles import JsonDoc, update_json
from firstmate.plugin.harness import FileChange, InstallOptions, InstallResult, read_only

#: The server's name in every harness's MCP configuration.
SERVER = "firstmate"


@attrs.frozen
class McpApproval:
    """Where a harness keeps the project servers the user approved: a project-relative JSON
    file (a personal one, never committed) and the top-level key of its list of server names."""

    path: str
    key: str

    def file(self, options: InstallOptions) -> Path:
        return options.project / self.path


@attrs.frozen
class McpServerSpec:
    """Where and how one harness reads MCP servers, as data."""

    harness: str
    #: Project-relative JSON (or, with :attr:`toml`, TOML) file the harness reads its
    #: project's MCP servers from.
    path: str
    #: The top-level key of the object holding servers by name (``mcpServers``, ``mcp``,
    #: ``mcp_servers``).
    key: str
    #: The file is TOML: our entry is the table ``[<key>.firstmate]``.
    toml: bool = False
    #: True: the command and its arguments are one list under ``command`` (OpenCode); False:
    #: ``command`` is the program and ``args`` its arguments.
    argv_command: bool = False
    #: Keys written before ``command`` (``{"type": "stdio"}``).
    head: Mapping[str, Any] = attrs.field(factory=dict, converter=read_only, hash=False)
    #: Keys written after it (``{"enabled": true}``).
    tail: Mapping[str, Any] = attrs.field(factory=dict, converter=read_only, hash=False)
    #: Said after an install that changed the file (how the harness asks to approve it…).
    notes: tuple[str, ...] = ()
    #: How to add the server by hand in the harness's personal scope, ``{argv}`` standing for
    #: the command line: said when git tracks :attr:`path`, so fm leaves it alone.
    by_hand: str = ""
    #: Where the install approves the server it registered, for a harness that asks first.
    approval: McpApproval | None = None

    def argv(self, options: InstallOptions) -> list[str]:
        words = [*shlex.split(options.fm_command), "mcp"]
        if options.home is not None:
            words += ["--home", str(options.home)]
        return words

    def entry(self, options: InstallOptions) -> dict[str, Any]:
        argv = self.argv(options)
        body: dict[str, Any] = copy.deepcopy(dict(self.head))
        if self.argv_command:
            body["command"] = argv
        else:
            body["command"], body["args"] = argv[0], argv[1:]
        body.update(copy.deepcopy(dict(self.tail)))
        return body

    def file(self, options: InstallOptions) -> Path:
        return options.project / self.path


def ours(entry: object) -> bool:
    """Whether a server entry (the one named :data:`SERVER`) runs ``fm mcp``, whatever the fm
    command (``/venv/bin/fm``, ``python -P -m firstmate``, a ``--fm-command``), home or shape."""
    if not isinstance(entry, dict):
        return False
    command, args = entry.get("command"), entry.get("args", [])
    if isinstance(command, list):
        words = command
    else:
        words = [command, *args] if isinstance(args, list) else [command]
    return all(isinstance(w, str) for w in words) and "mcp" in words[1:]


def _servers(doc: JsonDoc, key: str) -> dict[str, Any] | None:
    servers = doc.get(key)
    return servers if isinstance(servers, dict) else None


def _remover(spec: McpServerSpec) -> Any:
    def remove(doc: JsonDoc) -> JsonDoc:
        servers = _servers(doc, spec.key)
        if servers is not None and ours(servers.get(SERVER)):
            del servers[SERVER]
            if not servers:
                del doc[spec.key]
        return doc

    return remove


def _adder(spec: McpServerSpec, options: InstallOptions) -> Any:
    wanted = spec.entry(options)

    def add(doc: JsonDoc) -> JsonDoc:
        from firstmate.plugin.configfiles import ShapeError

        servers = doc.setdefault(spec.key, {})
        if not isinstance(servers, dict):
            raise ShapeError(f"its {spec.key!r} is not an object")
        if SERVER in servers and not ours(servers[SERVER]):
            raise ShapeError(f"its {spec.key}.{SERVER} is a server of your own, not fm mcp; "
                             "rename it")
        servers[SERVER] = wanted
        return doc

    return add


def _toml_change(spec: McpServerSpec, options: InstallOptions, *, removing: bool) -> FileChange:
    """Our table added to (or taken out of) the spec's TOML file, the rest kept as written."""
    from firstmate.plugin import tomltable
    from firstmate.plugin.configfiles import update_text

    def remove(text: str) -> str:
        return tomltable.remove(text, spec.key, SERVER, ours)

    if removing:
        prune = options.project if "/" in spec.path else None
        return update_text(spec.file(options), remove, remove_ours=remove,
                           dry_run=options.dry_run, delete_if_vacant=True, prune_upto=prune)
    wanted = spec.entry(options)
    return update_text(spec.file(options),
                       lambda text: tomltable.upsert(text, spec.key, SERVER, wanted, ours),
                       remove_ours=remove, dry_run=options.dry_run, personal=True)


def _names(doc: JsonDoc, key: str) -> list[Any] | None:
    """The approval list at *key*; a lone name (which the harness reads as a list of one)
    becomes a list; None when there is none."""
    from firstmate.plugin.configfiles import ShapeError

    names = doc.get(key)
    if names is None:
        return None
    if isinstance(names, str):
        names = doc[key] = [names]
    if not isinstance(names, list):
        raise ShapeError(f"its {key!r} is a JSON {type(names).__name__}, expected a list of "
                         "server names")
    return names


def _approver(approval: McpApproval) -> Any:
    def approve(doc: JsonDoc) -> JsonDoc:
        names = _names(doc, approval.key)
        if names is None:
            doc[approval.key] = [SERVER]
        elif SERVER not in names:
            names.append(SERVER)
        return doc

    return approve


def _disapprover(approval: McpApproval, *, users: bool = False) -> Any:
    """Takes our name out of the list (and the list, when that empties it); *users*: the name
    was the user's before the install, so it stays."""
    def disapprove(doc: JsonDoc) -> JsonDoc:
        names = doc.get(approval.key)
        if users or not isinstance(names, list) or SERVER not in names:
            return doc
        names[:] = [name for name in names if name != SERVER]
        if not names:
            del doc[approval.key]
        return doc

    return disapprove


def _approved_before(approval: McpApproval, options: InstallOptions) -> bool:
    """Whether the approval file held our name before fm first changed it (the original the
    install kept in the home says)."""
    from firstmate.plugin import installkeep
    from firstmate.plugin.configfiles import ConfigFileError, parse_json

    keeper = installkeep.current()
    path = approval.file(options)
    original = keeper.original(path) if keeper is not None else None
    if original is None:
        return False
    try:
        names = parse_json(original, path).get(approval.key)
    except ConfigFileError:
        return False
    return names == SERVER or (isinstance(names, list) and SERVER in names)


def _approve(approval: McpApproval, options: InstallOptions) -> FileChange:
    return update_json(approval.file(options), _approver(approval),
                       remove_ours=_disapprover(approval), dry_run=options.dry_run,
                       personal=True)


def _disapprove(approval: McpApproval, options: InstallOptions, *, users: bool) -> FileChange:
    remove = _disapprover(approval, users=users)
    prune = options.project if "/" in approval.path else None
    return update_json(approval.file(options), remove, remove_ours=remove,
                       dry_run=options.dry_run, delete_if_vacant=True, prune_upto=prune)


def tracked(spec: McpServerSpec, options: InstallOptions) -> bool:
    """Whether git tracks the spec's file in the project (fm then leaves it alone)."""
    from firstmate.base.gitroot import worktree_root
    from firstmate.plugin.gitexclude import tracked as git_tracked

    root = worktree_root(str(options.project))
    path = spec.file(options)
    return root is not None and path in git_tracked(root, [path])


def install(spec: McpServerSpec, options: InstallOptions,
            notes: list[str]) -> tuple[FileChange, ...] | None:
    """Our server entry merged into the spec's file, then approved where the spec says (None:
    not registered, *notes* say why)."""
    from firstmate.plugin.mcpsdk import how_to_add, sdk_missing

    if sdk_missing() is not None:
        notes.append(f"the firstmate MCP server is not registered: this fm has no MCP SDK; add "
                     f"it with {how_to_add()}, then rerun fm install {spec.harness}")
        return None
    if tracked(spec, options):
        argv = shlex.join(spec.argv(options))
        notes.append(f"the firstmate MCP server is not registered: git tracks {spec.path} and "
                     f"the entry names this machine's paths; "
                     + (spec.by_hand.format(argv=argv) if spec.by_hand else
                        f"add {argv} in your personal MCP settings"))
        return None
    changes = [_toml_change(spec, options, removing=False) if spec.toml else
               update_json(spec.file(options), _adder(spec, options),
                           remove_ours=_remover(spec), dry_run=options.dry_run, personal=True)]
    if spec.approval is not None:
        changes.append(_approve(spec.approval, options))
    if any(change.action != "unchanged" for change in changes):
        notes.extend(spec.notes)
    return tuple(changes)


def uninstall(spec: McpServerSpec, options: InstallOptions, *,
              users_approval: bool = False) -> tuple[FileChange, ...]:
    """Our server entry taken out of the spec's file, and our approval out of its file (unless
    *users_approval*: the user had approved the name before the install); each file put back
    as fm found it when nothing else changed, or removed when fm made it and it holds nothing
    else."""
    remove = _remover(spec)
    prune = options.project if "/" in spec.path else None
    changes = [_toml_change(spec, options, removing=True) if spec.toml else
               update_json(spec.file(options), remove, remove_ours=remove,
                           dry_run=options.dry_run, delete_if_vacant=True, prune_upto=prune)]
    if spec.approval is not None:
        changes.append(_disapprove(spec.approval, options, users=users_approval))
    return tuple(changes)


def _combined(changes: tuple[FileChange, ...],
              more: tuple[FileChange, ...]) -> tuple[FileChange, ...]:
    """*changes* followed by *more*, one line per file: the approval lives in a file the hooks
    may have changed in the same transaction (created then merged is created; a later removal
    is what happened in the end)."""
    combined = list(changes)
    for change in more:
        at = next((i for i, c in enumerate(combined) if c.path == change.path), None)
        if at is None:
            if change.action != "unchanged" or change.path.exists():
                combined.append(change)
        elif combined[at].action == "unchanged" or change.action == "removed":
            combined[at] = change
    return tuple(combined)


def around(spec: McpServerSpec | None, options: InstallOptions, *, removing: bool,
           files: Callable[[], InstallResult]) -> InstallResult:
    """The harness's own install or uninstall (*files*) with the server's entry added or taken
    out in the same transaction: both change, or neither."""
    if spec is None:
        return files()
    from firstmate.plugin import filestage

    notes: list[str] = []
    with filestage.transaction():
        # (asked before the harness's own uninstall, which may drop the file's record)
        users = removing and spec.approval is not None and \
            _approved_before(spec.approval, options)
        result = files()
        changes = uninstall(spec, options, users_approval=users) if removing else \
            install(spec, options, notes)
    if changes is None:
        return attrs.evolve(result, notes=(*result.notes, *notes))
    return attrs.evolve(result, changes=_combined(result.changes, changes),
                        notes=(*result.notes, *notes), mcp=not removing)


__all__ = ["SERVER", "McpApproval", "McpServerSpec", "around", "install", "ours", "tracked",
           "uninstall"]
