"""``fm check``: register, list, remove and try out the watcher's state checks."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence

from firstmate.base.errors import FirstmateError, StateError, UsageError
from firstmate.base.exitcodes import ExitCode
from firstmate.cli.args import Parser
from firstmate.store.home import Home, open_home, resolve_root


def parser() -> Parser:
    parser = Parser("fm check", "Register, list, remove and try out the watcher's state checks: "
                    "commands the watcher runs each poll, whose output becomes a wake.")
    add = parser.add_command(
        "add", "register a check: the command after --, run in the current directory",
        usage="fm check add [-h] [--replace] NAME -- COMMAND [ARGS...]")
    add.add_argument("name", metavar="NAME", help="the check's name (A-Z a-z 0-9 . _ -)")
    add.add_argument("--replace", action="store_true",
                     help="replace an existing check of that name (otherwise exit 3)")
    add.add_argument("command", nargs="*", default=[], metavar="-- COMMAND [ARGS...]",
                     help="the argv to run, after a -- (required)")
    listing = parser.add_command("list", "every registered check: ok with its command, or "
                                 "REJECTED and why")
    listing.add_argument("--json", action="store_true",
                         help='print one JSON object: {"checks": [{name, status, argv, cwd, '
                              'added_at, last_run | why}...]}')
    remove = parser.add_command("remove", "delete a check's definition, authenticated or rejected")
    remove.add_argument("name", metavar="NAME", help="the check to delete")
    run = parser.add_command("run", "run one check now and print the reason line the watcher "
                             "would print; changes no state")
    run.add_argument("name", metavar="NAME", help="the check to run")
    return parser


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    command = parser()
    if args[:1] == ["add"] and "--" in args:
        # argparse mangles what follows a "--": the check's own argv is split off first.
        split = args.index("--")
        return _add(command.commands["add"], args[1:split], args[split + 1:])
    ns = command.parse(args)
    if ns.command == "add":
        raise command.commands["add"].usage_error(
            "the -- before the check's command is required")
    if ns.command == "list":
        return _list(ns.json)
    if ns.command == "remove":
        return _remove(ns.name)
    return _run(ns.name)


def _add(add: Parser, head: list[str], command: list[str]) -> int:
    from firstmate.store import checks

    ns = add.parse(head)
    if ns.command:
        raise add.usage_error(f"unexpected {ns.command[0][:40]!r} before --; give one NAME")
    if not command:
        raise add.usage_error("missing command after -- (the check's argv)")
    definition = checks.add(open_home(os.environ), ns.name, command, replace=ns.replace)
    sys.stdout.write(f"check: added {definition.name}: {shlex.join(definition.argv)} (in {definition.cwd})\n")
    return ExitCode.OK


def _home_or_none() -> Home | None:
    try:
        return open_home(os.environ, create=False)
    except StateError:
        if os.path.isdir(resolve_root(os.environ)):
            raise
        return None


def _list(as_json: bool) -> int:
    from firstmate.store import checks

    home = _home_or_none()
    valid, rejected = checks.load(home) if home is not None else ([], [])
    runs = checks.read_state(home).last_run if home is not None else {}
    entries: list[dict[str, object]] = []
    entries += [
        {"name": d.name, "status": "ok", "argv": list(d.argv), "cwd": d.cwd, "added_at": d.added_at,
         "last_run": runs.get(d.name)}
        for d in valid
    ]
    entries += [{"name": r.name, "status": "rejected", "why": r.why} for r in rejected]
    entries.sort(key=lambda entry: str(entry["name"]))
    if as_json:
        from firstmate.cli import jsonout

        jsonout.write({"checks": entries})
        return ExitCode.OK
    if not entries:
        sys.stdout.write("no checks registered; add one with: fm check add NAME -- COMMAND [ARGS...]\n")
        return ExitCode.OK
    from firstmate.base.wakeinput import clean

    for entry in entries:
        # A name comes from a file name anyone could have dropped there: nothing reaches the
        # terminal unsanitised (escape sequences, controls, undecodable bytes).
        name = clean(str(entry["name"]), 200)
        if entry["status"] == "ok":
            argv = entry["argv"]
            assert isinstance(argv, list)
            sys.stdout.write(f"{name}\tok\t{clean(shlex.join(str(a) for a in argv), 2000)}\n")
        else:
            sys.stdout.write(f"{name}\tREJECTED ({clean(str(entry['why']), 200)}); re-add it or "
                             f"run fm check remove {shlex.quote(name)}\n")
    return ExitCode.OK


def _remove(name: str) -> int:
    from firstmate.store import checks

    checks.remove(open_home(os.environ, create=False), name)
    sys.stdout.write(f"check: removed {name}\n")
    return ExitCode.OK


def _run(name: str) -> int:
    """Run one authenticated check now and print what the watcher would make of it."""
    from firstmate.base.envnum import env_float
    from firstmate.store import checks
    from firstmate.watch.sources.checks import DEFAULT_TIMEOUT

    home = open_home(os.environ, create=False)
    valid, rejected = checks.load(home)
    definition = next((d for d in valid if d.name == name), None)
    if definition is None:
        if any(r.name == name for r in rejected):
            raise FirstmateError(f"check {name!r} is rejected (unauthenticated); re-add it with "
                                 f"fm check add {shlex.quote(name)} --replace -- COMMAND [ARGS...]")
        raise UsageError(f"no check named {name!r}; fm check list shows the registered ones")
    result = checks.run_check(definition, env_float(os.environ, "FM_CHECK_TIMEOUT", DEFAULT_TIMEOUT),
                              os.environ, home)
    sys.stdout.write((result.reason or f"check: {definition.name}: ok (nothing to report)") + "\n")
    return ExitCode.OK
