"""``fm crew``: register crews and record what they report.

``fm crew status`` and ``fm crew turn-ended`` run from crews' shells and harness hooks on every
report, so they are parsed by hand and import only the standard-library layer
(:mod:`firstmate.base.crewreport`); not even :mod:`typing`, which costs half an interpreter's
start.
"""

from __future__ import annotations

import os
import sys

from firstmate.base.errors import UsageError
from firstmate.base.exitcodes import ExitCode

TYPE_CHECKING = False  # typing's own, without importing typing (see firstmate/__init__.py)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import NoReturn

    from firstmate.store.home import Home

USAGE = """usage: fm crew add NAME --pane TARGET [--replace]
       fm crew spawn NAME --harness H [--cwd DIR | --worktree BRANCH] [-- PROMPT...]
       fm crew steer NAME "instruction"
       fm crew stop NAME
       fm crew list [--json]
       fm crew remove NAME
       fm crew status NAME "<verb>: note"
       fm crew turn-ended NAME
       fm crew answer NAME --key KEY "answer" [--send]"""


def _home(*, create: bool) -> Home:
    from firstmate.store.home import open_home

    return open_home(os.environ, create=create)


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE + "\n")
        return ExitCode.OK if args else ExitCode.USAGE
    command, rest = args[0], args[1:]
    helping = any(arg in ("-h", "--help") for arg in rest)
    if command == "status" and not helping:
        return _status(rest)
    if command == "turn-ended" and not helping:
        return _turn_ended(rest)
    if command in ("spawn", "steer", "stop", "list"):
        from firstmate.cli import crewfleet

        return crewfleet.main(command, rest)
    handler = {"add": _add, "remove": _remove, "answer": _answer,
               "status": _status, "turn-ended": _turn_ended}.get(command)
    if handler is None:
        raise UsageError(f"unknown crew command {command!r}; run fm crew --help")
    if helping:
        sys.stdout.write(USAGE + "\n")
        return ExitCode.OK
    return handler(rest)


# --- hot path ----------------------------------------------------------------------------------


def _report_root() -> str:
    """The home a crew reports to, verified and still there (standard library only)."""
    from firstmate.base.crewreport import check_ground
    from firstmate.base.homeroot import find_root

    root = find_root(os.environ)
    check_ground(root)
    return root


def _status(rest: list[str]) -> int:
    from firstmate.base import crewreport

    if len(rest) < 2:
        raise UsageError('usage: fm crew status NAME "<verb>: note"')
    crewreport.status(_report_root(), rest[0], " ".join(rest[1:]))
    return ExitCode.OK


def _turn_ended(rest: list[str]) -> int:
    from firstmate.base import crewreport

    if len(rest) != 1:
        raise UsageError("usage: fm crew turn-ended NAME")
    crewreport.turn_ended(_report_root(), rest[0])
    return ExitCode.OK


# --- the rest ----------------------------------------------------------------------------------


def _parser(prog: str) -> argparse.ArgumentParser:
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            raise UsageError(f"{self.prog}: {message}; run fm crew --help")

    return Parser(prog=prog, add_help=False)


def _add(rest: list[str]) -> int:
    from firstmate.store import crew

    parser = _parser("fm crew add")
    parser.add_argument("name")
    parser.add_argument("--pane", required=True)
    parser.add_argument("--replace", action="store_true")
    ns = parser.parse_args(rest)
    home = _home(create=True)
    before = crew.get(home, ns.name) if crew.exists(home, crew.validate_name(ns.name)) else None
    added = crew.add(home, ns.name, ns.pane, replace=ns.replace)
    if before is None:
        sys.stdout.write(f"crew: added {added.name} (pane {added.pane})\n")
    elif before.pane == added.pane:
        sys.stdout.write(f"crew: {added.name} is already registered (pane {added.pane})\n")
    else:
        sys.stdout.write(f"crew: {added.name} now watches pane {added.pane} (was {before.pane})\n")
    _check_pane(added.name, added.pane)
    return ExitCode.OK


def _check_pane(name: str, pane: str) -> None:
    """Ask tmux, as the watcher will, whether the pane exists. The registration stands either
    way (the pane may be created later); a missing pane is one warning naming the fix."""
    from firstmate.watch.backends.tmux import TmuxBackend

    backend = TmuxBackend.from_env(os.environ)
    found = backend.has_pane(pane)
    why = " ".join(str(backend.last_error or "").split())[:200]
    if found is False:
        sys.stderr.write(
            f"crew: warning: tmux has no pane {pane} ({why}); {name} is registered anyway: start "
            f"the crew in that pane, or fix it with fm crew add {name} --pane TARGET --replace\n")
    elif found is None:
        sys.stderr.write(f"crew: note: pane {pane} was not checked ({why})\n")


def _remove(rest: list[str]) -> int:
    from firstmate.store import crew

    parser = _parser("fm crew remove")
    parser.add_argument("name")
    ns = parser.parse_args(rest)
    removed = crew.remove(_home(create=False), ns.name)
    sys.stdout.write(f"crew: removed {removed.name}\n")
    return ExitCode.OK


def _answer(rest: list[str]) -> int:
    from firstmate.base.errors import FirstmateError
    from firstmate.store import crew

    parser = _parser("fm crew answer")
    parser.add_argument("name")
    parser.add_argument("--key", required=True)
    parser.add_argument("--send", action="store_true")
    parser.add_argument("answer", nargs="+")
    ns = parser.parse_args(rest)
    home = _home(create=False)
    text = " ".join(ns.answer)
    decision = crew.answer(home, ns.name, ns.key, text)
    sys.stdout.write(f"crew: answered {ns.name} [key={decision.key}]\n")
    if ns.send:
        from firstmate.watch.backends.tmux import TmuxBackend

        backend = TmuxBackend.from_env(os.environ)
        pane = crew.get(home, ns.name).pane
        if not backend.send(pane, crew.clean_text(text)):
            raise FirstmateError(
                f"answer recorded, but typing it into pane {pane} failed: {backend.last_error}; "
                "send it to the crew yourself"
            )
        sys.stdout.write(f"crew: sent the answer to pane {pane}\n")
    return ExitCode.OK
