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
from typing import TYPE_CHECKING, NoReturn

import attrs

from firstmate.base.errors import FirstmateError
from firstmate.base.exitcodes import ExitCode
from firstmate.cli.args import Parser, wants_help
from firstmate.plugin.harness import (
    FileChange,
    HarnessInfo,
    InstallFlag,
    InstallOptions,
    InstallResult,
)
from firstmate.store.home import Home

if TYPE_CHECKING:
    from firstmate.plugin.filestage import Transaction
    from firstmate.plugin.manager import PluginHost

_DONE = {"created": "created", "merged": "merged", "restored": "restored",
         "removed": "removed", "unchanged": "unchanged"}
_WOULD = {"created": "would create", "merged": "would merge", "restored": "would restore",
          "removed": "would remove", "unchanged": "unchanged"}
_SUMMARY = {
    "install": "Write or merge a harness's own config files under the project directory, so the "
               "harness runs fm's hooks (or loads its shim). Idempotent; the user's own entries "
               "are kept, and a file we cannot read is never written.",
    "uninstall": "Remove exactly what fm install wrote for a harness; the user's own entries stay.",
}


def parser(verb: str = "install", harness: str | None = None,
           flags: Sequence[InstallFlag] | None = None) -> Parser:
    """The command line of ``fm install`` / ``fm uninstall``; with *flags*, the harness flags
    the plugin for *harness* declares (``HarnessInfo.install_flags``)."""
    if flags is None:
        epilog = ("Each harness adds the flags its plugin declares: fm install HARNESS --help "
                  "lists them (fm plugin list shows the installed harnesses).")
    elif not flags:
        epilog = f"{harness} takes no harness flags."
    else:
        epilog = None
    installing = verb == "install"
    pinned = " [--home DIR]" if installing else ""
    usage = (f"fm {verb} {harness or 'HARNESS'} [-h] [--project DIR]{pinned} [--dry-run] [--json]"
             + (" [--fm-command CMD]" if installing else ""))
    usage += "".join(f" [--{f.name}{'=' + f.metavar if f.metavar else ''}]" for f in flags or ())
    if flags is None:
        usage += " [HARNESS FLAGS]"
    parser = Parser(f"fm {verb}", _SUMMARY[verb], epilog=epilog, usage=usage)
    if harness is not None:
        parser.help_command = f"fm {verb} {harness}"
    parser.add_argument("harness", metavar="HARNESS",
                        help="the harness whose config to change (fm plugin list shows the "
                             "installed ones)")
    parser.add_argument("--project", metavar="DIR",
                        help="the project directory the config files live under (default: the "
                             "current directory; it must exist)")
    # An uninstall finds our entries by what they are, whatever home or command they name:
    # --home and --fm-command mean nothing to it, so it does not offer them, and takes them
    # without effect on the files from a script that repeats its install's command line
    # (--home still names a home whose install record goes).
    parser.add_argument("--home", metavar="DIR",
                        help="pin this Firstmate home into the installed hook commands"
                        if installing else argparse.SUPPRESS)
    parser.add_argument("--dry-run", action="store_true",
                        help="say what would change and write nothing")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: verb, harness, project, home, dry_run, "
                             "fm_command, changes, notes")
    # None: this installation's own entry point by absolute path (firstmate.plugin.fmcommand).
    parser.add_argument("--fm-command", metavar="CMD",
                        help="the command the hooks run instead of this installation's own "
                             "entry point (read like a shell command line)"
                        if installing else argparse.SUPPRESS)
    if flags:
        group = parser.add_argument_group(f"{harness} flags")
        for flag in flags:
            dest = f"flag:{flag.name}"
            if flag.metavar:
                group.add_argument(f"--{flag.name}", metavar=flag.metavar, dest=dest,
                                   help=flag.help)
            else:
                group.add_argument(f"--{flag.name}", action="store_const", const="true",
                                   dest=dest, help=flag.help)
    return parser


def accepted(info: HarnessInfo | None, harness: str) -> str:
    """The sentence naming the harness flags *harness* accepts."""
    flags = info.install_flags if info is not None else ()
    if not flags:
        return f"{harness} takes no harness flags"
    shown = ", ".join(f"--{f.name}" + (f"={f.metavar}" if f.metavar else "") for f in flags)
    return f"{harness} accepts {shown}"


def _harness_named(argv: Sequence[str], verb: str) -> str | None:
    """The HARNESS word of *argv* (None when there is none), read with the core options only."""
    words = [word for word in argv if word not in ("-h", "--help")]
    try:
        found, _extra = parser(verb, flags=()).parse_known(words)
    except FirstmateError:  # the full parse reports it
        return None
    harness: str | None = found.harness
    return harness


def _help(argv: Sequence[str], verb: str) -> NoReturn:
    """Print the help, with the harness flags of the harness named, when its plugin loads."""
    harness = _harness_named(argv, verb)
    if harness is None:
        parser(verb).show_help()
    try:
        from firstmate.plugin.manager import load_harness

        info = load_harness(harness).harness(harness)
    except FirstmateError as exc:
        command = parser(verb)
        command.epilog = f"No harness flags shown: {' '.join(exc.message.split())}."
        command.show_help()
    parser(verb, harness, info.install_flags if info is not None else ()).show_help()


@attrs.frozen
class Request:
    """A parsed ``fm install`` / ``fm uninstall`` command line."""

    options: InstallOptions
    as_json: bool
    #: Whether ``--fm-command`` was given (an install record keeps it for a reinstall).
    fm_command_given: bool


def parse(argv: Sequence[str], verb: str, info: HarnessInfo | None = None) -> Request:
    """*argv* with the harness flags *info* declares; any other flag is refused, naming them."""
    harness = _harness_named(argv, verb)
    flags = info.install_flags if info is not None else ()
    command = parser(verb, harness, flags)
    args, extra = command.parse_known(argv)
    if extra:
        unknown = next((word for word in extra if word.startswith("-")), None)
        if unknown is not None and harness is not None:
            from firstmate.base.suggest import option_hint

            option = unknown.partition("=")[0]
            raise command.usage_error(f"unknown option {option}; {accepted(info, harness)}",
                                      hint=option_hint(option, command._option_string_actions))
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.fm_command is not None and args.fm_command.strip() == "":
        raise command.usage_error("--fm-command needs a command")
    from firstmate.plugin.fmcommand import own_command

    project = Path(os.path.abspath(os.path.expanduser(args.project or os.getcwd())))
    home = Path(os.path.abspath(os.path.expanduser(args.home))) if args.home else None
    chosen = {flag.name: getattr(args, f"flag:{flag.name}") for flag in flags}
    options = InstallOptions(
        harness=args.harness, project=project, home=home, dry_run=args.dry_run,
        fm_command=args.fm_command if args.fm_command is not None else own_command(),
        flags={name: value for name, value in chosen.items() if value is not None},
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
    if wants_help(argv):
        _help(argv, verb)
    harness = _harness_named(argv, verb)
    if harness is None:
        parser(verb).parse(argv)  # the usage error for a command line without a harness
        raise parser(verb).usage_error("a HARNESS is required")
    from firstmate.plugin import filestage, installhome
    from firstmate.plugin.configfiles import require_project
    from firstmate.plugin.manager import load_harness

    host = load_harness(harness)
    request = parse(argv, verb, host.harness(harness))
    options = request.options
    require_project(options)
    choice = installhome.choose(options, os.environ, host)
    home = choice.home
    made: list[Home] = []
    ignored: list[str] = []
    # The harness's files, the install records and a new home change together, or nothing
    # changes: a full disk or any failure halfway leaves every file (and no new home) behind.
    with filestage.transaction() as tx:
        if not remove and not options.dry_run:
            _make_home(home, tx, made)
            installhome.exclude_home(home, dry_run=False)
        result = host.uninstall(home, options) if remove else host.install(home, options)
        if result is None:
            raise FirstmateError(
                f"the {options.harness} plugin does not implement fm {verb}; upgrade it with "
                f"pip install -U firstmate-plugin-{options.harness}",
                exit_code=ExitCode.PLUGIN,
            )
        if not options.dry_run:
            from firstmate.base.homeroot import locate

            # Kept in the home the hooks use, and in the one fm finds from the project
            # directory (where a plain fm doctor run there looks).
            found = Path(locate(os.environ, str(options.project))[0])
            homes = {home.root, found}
            if remove:
                homes |= _recorded_homes(Home(found), options)
            for where in homes:
                ignored += _record(host, Home(where), request, remove, tx, made, result.mcp)
    for new in made:
        _announce(new, options, choice.source)
    for line in (*choice.notes, *ignored):
        sys.stderr.write(f"fm: {verb} {options.harness}: {line}\n")
    if request.as_json:
        from firstmate.cli import jsonout

        jsonout.write({**to_json(result, options, verb), "home_used": str(home.root),
                       "home_source": choice.source})
    else:
        report(result, options, verb)
    return ExitCode.OK


def _recorded_homes(home: Home, options: InstallOptions) -> set[Path]:
    """The homes an install of this harness into this project was pinned to (``--home``), as
    *home*'s own records say (only entries that verify): an uninstall drops their records too,
    without being told them."""
    from firstmate.plugin import installrecord

    records = installrecord.load(home, options.harness).for_project(options.project)
    return {record.home for record in records if record.home is not None}


def _make_home(home: Home, tx: Transaction, made: list[Home]) -> None:
    """Set up *home* for an install (removed again if the install fails)."""
    if home.state.is_dir():
        return
    tx.note_dirs(_missing_dirs(home))
    from firstmate.base.homemark import mark_path

    tx.note_files([mark_path(str(home.root))])
    home.ensure()  # (and refused unless it is yours alone)
    made.append(home)


def _record(host: PluginHost, home: Home, request: Request, remove: bool, tx: Transaction,
            made: list[Home], mcp: bool) -> list[str]:
    """Stage *home*'s install record of *request* (doctor checks an install with the options it
    was made with: firstmate.plugin.installrecord); what the file held that was ignored."""
    from firstmate.plugin import installrecord

    options = request.options
    if remove:
        if not home.state.is_dir():
            return []

        def installed(record: installrecord.InstallRecord) -> bool:
            probe = host.uninstall(home, record.options(dry_run=True))
            return probe is not None and probe.changed

        installrecord.prune(home, options.harness, options.project, installed)
        return []
    _make_home(home, tx, made)
    before = installrecord.remember(home, options, fm_command_given=request.fm_command_given,
                                    mcp=mcp)
    dropped = before.dropped()
    return [dropped] if dropped else []


def _missing_dirs(home: Home) -> list[str]:
    """The directories making *home* would create, outermost first."""
    from firstmate.plugin.installkeep import missing_dirs

    missing = missing_dirs(str(home.root))
    for sub in ("state", "state/logs", "state/crew", "config"):
        path = os.path.join(str(home.root), sub)
        if not os.path.lexists(path):
            missing.append(path)
    return missing


def _announce(home: Home, options: InstallOptions, source: str) -> None:
    """Say a new home was made (a mistyped --home or FM_HOME must not go unnoticed)."""
    if options.home is not None and home.root == options.home:
        sys.stderr.write(f"fm: created a new home at {home.root} (--home); if you meant an "
                         "existing home, correct --home\n")
        return
    if source == "new":
        sys.stderr.write(f"fm: created a new home at {home.root}, this project's own fleet "
                         "(kept out of git in .git/info/exclude; fm status says which home)\n")
        return
    from firstmate.base.homeroot import announce_created

    announce_created(str(home.root), os.environ, str(options.project))


def main(argv: Sequence[str]) -> int:
    return run(argv, remove=False)
