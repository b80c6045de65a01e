"""``fm check``: register, list, remove and try out the watcher's state checks."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Sequence

from firstmate.base.errors import FirstmateError, StateError, UsageError
from firstmate.base.exitcodes import ExitCode
from firstmate.store.home import Home, open_home, resolve_root

USAGE = """usage: fm check add NAME [--replace] -- COMMAND [ARGS...]
       fm check list [--json]
       fm check remove NAME
       fm check run NAME"""


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE + "\n")
        return ExitCode.OK if args else ExitCode.USAGE
    command, rest = args[0], args[1:]
    handler = {"add": _add, "list": _list, "remove": _remove, "run": _run}.get(command)
    if handler is None:
        raise UsageError(f"unknown check command {command!r}; run fm check --help")
    if rest[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE + "\n")
        return ExitCode.OK
    return handler(rest)


def _add(rest: list[str]) -> int:
    from firstmate.store import checks

    if "--" not in rest:
        raise UsageError("usage: fm check add NAME [--replace] -- COMMAND [ARGS...] (the -- is required)")
    split = rest.index("--")
    head, command = rest[:split], rest[split + 1 :]
    replace = "--replace" in head
    names = [arg for arg in head if arg != "--replace"]
    if len(names) != 1 or names[0].startswith("-"):
        raise UsageError("usage: fm check add NAME [--replace] -- COMMAND [ARGS...]")
    if not command:
        raise UsageError(f"missing command: run fm check add {names[0]} -- COMMAND [ARGS...]")
    definition = checks.add(open_home(os.environ), names[0], command, replace=replace)
    sys.stdout.write(f"check: added {definition.name}: {shlex.join(definition.argv)} (in {definition.cwd})\n")
    return ExitCode.OK


def _home_or_none() -> Home | None:
    try:
        return open_home(os.environ, create=False)
    except StateError:
        if os.path.isdir(resolve_root(os.environ)):
            raise
        return None


def _list(rest: list[str]) -> int:
    from firstmate.store import checks

    as_json = rest == ["--json"]
    if rest and not as_json:
        raise UsageError("usage: fm check list [--json]")
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
        sys.stdout.write(json.dumps(entries, indent=1) + "\n")
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


def _remove(rest: list[str]) -> int:
    from firstmate.store import checks

    if len(rest) != 1:
        raise UsageError("usage: fm check remove NAME")
    checks.remove(open_home(os.environ, create=False), rest[0])
    sys.stdout.write(f"check: removed {rest[0]}\n")
    return ExitCode.OK


def _run(rest: list[str]) -> int:
    """Run one authenticated check now and print what the watcher would make of it."""
    from firstmate.base.envnum import env_float
    from firstmate.store import checks
    from firstmate.watch.sources.checks import DEFAULT_TIMEOUT

    if len(rest) != 1:
        raise UsageError("usage: fm check run NAME")
    home = open_home(os.environ, create=False)
    valid, rejected = checks.load(home)
    definition = next((d for d in valid if d.name == rest[0]), None)
    if definition is None:
        if any(r.name == rest[0] for r in rejected):
            raise FirstmateError(f"check {rest[0]!r} is rejected (unauthenticated); re-add it first")
        raise UsageError(f"no check named {rest[0]!r}; fm check list shows the registered ones")
    result = checks.run_check(definition, env_float(os.environ, "FM_CHECK_TIMEOUT", DEFAULT_TIMEOUT),
                              os.environ, home)
    sys.stdout.write((result.reason or f"check: {definition.name}: ok (nothing to report)") + "\n")
    return ExitCode.OK
