"""Register ``fm mcp`` where a harness reads its MCP servers, from a spec its plugin declares.

An :class:`McpServerSpec` names the JSON file (project-relative), the object in it that holds
servers by name, and the entry's shape; each harness's plugin owns its own. The entry is
``firstmate``, running the same absolute entry point as the hooks (``options.fm_command``) with
``mcp`` (and ``--home`` when the install pins one). It names this machine's paths, so it is
personal: written only into a file git does not track, and kept out of git; where git tracks
the file, nothing is written there and a note says how to add the server in the harness's
personal scope instead. It is registered only when this fm's environment has the MCP SDK the
server needs (``firstmate[mcp]``); otherwise a note says how to add it. Every change goes
through :mod:`firstmate.plugin.configfiles` (idempotent, the user's entries kept, nothing
written on a dry run), so doctor's dry-run install checks it like the hooks.
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
class McpServerSpec:
    """Where and how one harness reads MCP servers, as data."""

    harness: str
    #: Project-relative JSON file the harness reads its project's MCP servers from.
    path: str
    #: The top-level key of the object holding servers by name (``mcpServers``, ``mcp``).
    key: str
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


def tracked(spec: McpServerSpec, options: InstallOptions) -> bool:
    """Whether git tracks the spec's file in the project (fm then leaves it alone)."""
    from firstmate.base.gitroot import worktree_root
    from firstmate.plugin.gitexclude import tracked as git_tracked

    root = worktree_root(str(options.project))
    path = spec.file(options)
    return root is not None and path in git_tracked(root, [path])


def install(spec: McpServerSpec, options: InstallOptions,
            notes: list[str]) -> FileChange | None:
    """Our server entry merged into the spec's file (None: not registered, *notes* say why)."""
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
    change = update_json(spec.file(options), _adder(spec, options), remove_ours=_remover(spec),
                         dry_run=options.dry_run, personal=True)
    if change.action != "unchanged":
        notes.extend(spec.notes)
    return change


def uninstall(spec: McpServerSpec, options: InstallOptions) -> FileChange:
    """Our server entry taken out of the spec's file; the file put back as fm found it when
    nothing else changed, or removed when fm made it and it holds nothing else."""
    remove = _remover(spec)
    prune = options.project if "/" in spec.path else None
    return update_json(spec.file(options), remove, remove_ours=remove, dry_run=options.dry_run,
                       delete_if_vacant=True, prune_upto=prune)


def around(spec: McpServerSpec | None, options: InstallOptions, *, removing: bool,
           files: Callable[[], InstallResult]) -> InstallResult:
    """The harness's own install or uninstall (*files*) with the server's entry added or taken
    out in the same transaction: both change, or neither."""
    if spec is None:
        return files()
    from firstmate.plugin import filestage

    notes: list[str] = []
    with filestage.transaction():
        result = files()
        change = uninstall(spec, options) if removing else install(spec, options, notes)
    if change is None:
        return attrs.evolve(result, notes=(*result.notes, *notes))
    shown = (change,) if change.action != "unchanged" or change.path.exists() else ()
    return attrs.evolve(result, changes=(*result.changes, *shown),
                        notes=(*result.notes, *notes), mcp=not removing)


__all__ = ["SERVER", "McpServerSpec", "around", "install", "ours", "tracked", "uninstall"]
