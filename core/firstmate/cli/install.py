"""``fm install <harness> …`` / ``fm uninstall <harness> …``: one harness plugin's config files.

Only the named harness's plugin is loaded; it writes or merges that harness's own config files
under the project directory (``firstmate_install``) or removes exactly its entries again
(``firstmate_uninstall``). Every file touched is printed, one line each.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import attrs

from firstmate.base.errors import FirstmateError, UsageError
from firstmate.base.exitcodes import ExitCode
from firstmate.plugin.harness import FileChange, InstallOptions, InstallResult
from firstmate.store.home import Home

USAGE = ("usage: fm {verb} <harness> [--project DIR] [--home DIR] [--dry-run] [--json] "
         "[--fm-command CMD] [--<harness flag>[=VALUE] …]")

_DONE = {"created": "created", "merged": "merged", "removed": "removed", "unchanged": "unchanged"}
_WOULD = {"created": "would create", "merged": "would merge", "removed": "would remove",
          "unchanged": "unchanged"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}; {self.usage}")


def _parser(verb: str) -> argparse.ArgumentParser:
    parser = _Parser(prog=f"fm {verb}", usage=USAGE.format(verb=verb), add_help=False,
                     allow_abbrev=False, exit_on_error=False)
    parser.add_argument("harness")
    parser.add_argument("--project", default=None)
    parser.add_argument("--home", default=None)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--json", action="store_true")
    # None: this installation's own entry point by absolute path (firstmate.plugin.fmcommand).
    parser.add_argument("--fm-command", default=None)
    return parser


def _flags(extra: Sequence[str], usage: str) -> dict[str, str]:
    """Harness flags: ``--name`` (→ "true"), ``--name=value`` or ``--name value`` (the harness is
    the only positional, so a bare word can only be the value of the flag before it); anything
    else is a usage error."""
    flags: dict[str, str] = {}
    words = list(extra)
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, value = word.partition("=")
        if not name.startswith("--") or len(name) < 3:
            raise UsageError(f"unexpected argument {word[:60]!r}; {usage}")
        if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
            value, eq = words[i + 1], "="
            i += 1
        flags[name[2:]] = value if eq else "true"
        i += 1
    return flags


@attrs.frozen
class Request:
    """A parsed ``fm install`` / ``fm uninstall`` command line."""

    options: InstallOptions
    as_json: bool
    #: Whether ``--fm-command`` was given (an install record keeps it for a reinstall).
    fm_command_given: bool


def parse(argv: Sequence[str], verb: str) -> Request:
    usage = USAGE.format(verb=verb)
    try:
        args, extra = _parser(verb).parse_known_args(list(argv))
    except argparse.ArgumentError as exc:
        raise UsageError(f"{exc}; {usage}") from exc
    if args.fm_command is not None and args.fm_command.strip() == "":
        raise UsageError(f"--fm-command needs a command; {usage}")
    from firstmate.plugin.fmcommand import own_command

    project = Path(os.path.abspath(os.path.expanduser(args.project or os.getcwd())))
    home = Path(os.path.abspath(os.path.expanduser(args.home))) if args.home else None
    options = InstallOptions(
        harness=args.harness, project=project, home=home, dry_run=args.dry_run,
        fm_command=args.fm_command if args.fm_command is not None else own_command(),
        flags=_flags(extra, usage),
    )
    return Request(options, args.json, args.fm_command is not None)


def _shown(path: Path, project: Path) -> str:
    try:
        return str(path.relative_to(project))
    except ValueError:
        return str(path)


def describe(change: FileChange, project: Path, dry_run: bool) -> str:
    verb = (_WOULD if dry_run else _DONE)[change.action]
    line = f"{verb} {_shown(change.path, project)}"
    if change.backup is not None:
        line += f" (original kept as {_shown(change.backup, project)})"
    return line


def to_json(result: InstallResult, options: InstallOptions, verb: str) -> dict[str, object]:
    """The ``--json`` form of a report: one object, the same facts as the lines."""
    return {
        "verb": verb, "harness": options.harness, "project": str(options.project),
        "home": None if options.home is None else str(options.home),
        "dry_run": options.dry_run, "fm_command": options.fm_command,
        "changes": [{"path": str(c.path), "action": c.action,
                     "backup": None if c.backup is None else str(c.backup),
                     "line": describe(c, options.project, options.dry_run)}
                    for c in result.changes],
        "notes": [" ".join(note.split()) for note in result.notes],
    }


def report(result: InstallResult, options: InstallOptions, verb: str) -> None:
    prefix = f"fm {verb} {options.harness}: "
    for change in result.changes:
        sys.stdout.write(prefix + describe(change, options.project, options.dry_run) + "\n")
    if not result.changes:
        sys.stdout.write(prefix + "no files to change\n")
    for note in result.notes:
        sys.stdout.write(prefix + "note: " + " ".join(note.split()) + "\n")


def run(argv: Sequence[str], *, remove: bool) -> int:
    verb = "uninstall" if remove else "install"
    if list(argv[:1]) in (["-h"], ["--help"]):
        sys.stdout.write(USAGE.format(verb=verb) + "\n")
        return ExitCode.OK
    request = parse(argv, verb)
    options = request.options
    from firstmate.plugin import installrecord
    from firstmate.plugin.configfiles import require_project
    from firstmate.plugin.manager import load_harness
    from firstmate.store.home import resolve_root

    require_project(options)
    home = Home(options.home if options.home is not None else resolve_root())
    host = load_harness(options.harness)
    result = host.uninstall(home, options) if remove else host.install(home, options)
    if result is None:
        raise FirstmateError(
            f"the {options.harness} plugin does not implement fm {verb}; upgrade it with "
            f"pip install -U firstmate-plugin-{options.harness}",
            exit_code=ExitCode.PLUGIN,
        )
    if not options.dry_run:
        # Doctor checks an install with the options it was made with (installrecord).
        # Kept in the home the hooks use, and in the one fm resolves from the project directory
        # (where a plain fm doctor run there looks).
        for where in {home.root, resolve_root(cwd=options.project)}:
            if remove:
                def installed(record: installrecord.InstallRecord) -> bool:
                    probe = host.uninstall(home, record.options(dry_run=True))
                    return probe is not None and probe.changed

                installrecord.prune(Home(where), options.harness, options.project, installed)
            else:
                installrecord.remember(_ensure(Home(where), options), options,
                                       fm_command_given=request.fm_command_given)
    if request.as_json:
        import json

        sys.stdout.write(json.dumps(to_json(result, options, verb), sort_keys=True) + "\n")
    else:
        report(result, options, verb)
    return ExitCode.OK


def _ensure(home: Home, options: InstallOptions) -> Home:
    """*home*, created if new, and said so (a mistyped --home or FM_HOME must not go unnoticed)."""
    if options.home is not None and home.root == options.home:
        if not home.state.is_dir():
            home.ensure()
            sys.stderr.write(f"fm: created a new home at {home.root} (--home); if you meant an "
                             "existing home, correct --home\n")
        return home
    return home.ensure(announce=os.environ, cwd=options.project)


def main(argv: Sequence[str]) -> int:
    return run(argv, remove=False)
