"""``fm crew``: register crews and record what they report.

``fm crew status`` and ``fm crew turn-ended`` run from crews' shells and harness hooks on every
report, so they are parsed by hand and import only the standard-library layer
(:mod:`firstmate.fast.crewreport`); not even :mod:`typing`, which costs half an interpreter's
start.
"""

from __future__ import annotations

import os
import sys

from firstmate.base.exitcodes import ExitCode
from firstmate.cli.main import wants_help

TYPE_CHECKING = False  # typing's own, without importing typing (see firstmate/__init__.py)
if TYPE_CHECKING:
    from collections.abc import Sequence

    from firstmate.cli.args import Parser
    from firstmate.store.crew import Crew
    from firstmate.store.home import Home

_NAME_HELP = "the crew's name: 1-64 characters from A-Z a-z 0-9 . _ -, not starting with . or -"


def parser() -> Parser:
    """The command line as help and errors describe it. ``status`` and ``turn-ended`` are parsed
    by hand (a hot path) and build this only for ``--help`` or a wrong command line."""
    from firstmate.cli.args import Parser

    parser = Parser("fm crew", "Register crews and the panes they work in, and record what they "
                    "report: status lines and turn ends the watcher turns into wakes.")
    add = parser.add_command("add", "register a crew and the backend pane it works in")
    add.add_argument("name", metavar="NAME", help=_NAME_HELP)
    add.add_argument("--pane", required=True, metavar="TARGET",
                     help="the pane the crew works in (tmux: session:window.pane or %%12)")
    add.add_argument("--replace", action="store_true",
                     help="move an already registered crew to another pane (keeps its logs)")
    add.add_argument("--host", metavar="HOST",
                     help="the pane is on fleet host HOST: the crew is registered there (over "
                          "SSH, fm fleet host add HOST --ssh …) and here as HOST.NAME")
    remove = parser.add_command("remove", "unregister a crew and delete its status log, "
                                "turn-end marker, pane log and cursors")
    remove.add_argument("name", metavar="NAME", help=_NAME_HELP)
    status = parser.add_command("status", "append a status line to the crew's log and ring the "
                                "watcher's doorbell (silent on success)")
    status.add_argument("name", metavar="NAME", help=_NAME_HELP)
    status.add_argument("text", nargs="+", metavar="TEXT",
                        help='the status line, "<verb>: note" (done:, blocked:, '
                             'needs-decision: key=K question, ...); words are joined')
    ended = parser.add_command("turn-ended", "record that the crew's turn ended (silent on "
                               "success)")
    ended.add_argument("name", metavar="NAME", help=_NAME_HELP)
    answer = parser.add_command("answer", "close the crew's open decision KEY with an answer")
    answer.add_argument("name", metavar="NAME", help=_NAME_HELP)
    answer.add_argument("--key", required=True, metavar="KEY", help="the open decision's key")
    answer.add_argument("--send", action="store_true",
                        help="also type the answer into the crew's pane (then Enter)")
    answer.add_argument("answer", nargs="+", metavar="ANSWER",
                        help="the answer (words are joined)")
    from firstmate.cli import crewfleet

    crewfleet.declare(parser, _NAME_HELP)  # spawn, steer, stop, list, peek and attach
    return parser


def _home(*, create: bool) -> Home:
    from firstmate.store.home import open_home

    return open_home(os.environ, create=create)


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    command, rest = (args[0], args[1:]) if args else ("", [])
    helping = wants_help(rest)
    if command == "status" and not helping:
        return _status(rest)
    if command == "turn-ended" and not helping:
        return _turn_ended(rest)
    if command in ("spawn", "steer", "stop", "list", "peek", "attach"):
        from firstmate.cli import crewfleet

        return crewfleet.main(command, rest, parser())
    handler = {"add": _add, "remove": _remove, "answer": _answer}.get(command)
    if handler is None:
        parser().parse(args)  # help, or the error naming the subcommands
    assert handler is not None
    return handler(rest)


# --- hot path ----------------------------------------------------------------------------------


def _report_root() -> str:
    """The home a crew reports to, verified and still there (standard library only)."""
    from firstmate.base.homeroot import find_root
    from firstmate.fast.crewreport import check_ground

    root = find_root(os.environ)
    check_ground(root)
    return root


def _status(rest: list[str]) -> int:
    from firstmate.fast import crewreport

    if len(rest) < 2 or rest[0].startswith("-"):
        # (A name starting with - is an option to fm crew add, so no crew has one.)
        parser().commands["status"].refuse(rest, "expected NAME and TEXT")
    crewreport.status(_report_root(), rest[0], " ".join(rest[1:]))
    return ExitCode.OK


def _turn_ended(rest: list[str]) -> int:
    from firstmate.fast import crewreport

    if len(rest) != 1 or rest[0].startswith("-"):
        parser().commands["turn-ended"].refuse(rest, "expected one NAME")
    crewreport.turn_ended(_report_root(), rest[0])
    return ExitCode.OK


# --- the rest ----------------------------------------------------------------------------------


def _add(rest: list[str]) -> int:
    from firstmate.store import crew

    ns = parser().commands["add"].parse(rest)
    home = _home(create=True)
    if ns.host is not None:
        return _add_there(home, ns.name, ns.pane, ns.host, ns.replace)
    before = crew.get(home, ns.name) if crew.exists(home, crew.validate_name(ns.name)) else None
    bound, why = _bind(ns.pane)
    if bound is None:
        added = crew.add(home, ns.name, ns.pane, replace=ns.replace)
    else:
        added = crew.add(home, ns.name, bound.pane, replace=ns.replace, label=ns.pane,
                         pid=bound.pid, started=bound.started)
    if before is None:
        sys.stdout.write(f"crew: added {added.name} (pane {added.shown})\n")
    elif before.binding() == added.binding():
        sys.stdout.write(f"crew: {added.name} is already registered (pane {added.shown})\n")
    else:
        sys.stdout.write(f"crew: {added.name} now watches pane {added.shown} (was "
                         f"{before.shown})\n")
    if why is not None:
        sys.stderr.write(why.format(name=added.name) + "\n")
    return ExitCode.OK


def _add_there(home: Home, name: str, target: str, host: str, replace: bool) -> int:
    """``fm crew add NAME --host HOST --pane TARGET``: registered by the fm on that host."""
    from firstmate.app.crewremote import add

    done = add(home, os.environ, host, name, target, replace=replace)
    for note in done.notes:
        sys.stderr.write(f"{host}: {note}\n")
    for line in done.said:
        sys.stdout.write(f"{host}: {line}\n")
    if done.registered:
        sys.stdout.write(f"crew: {done.name} is registered here (pane {host}:{done.pane})\n")
    else:
        sys.stdout.write(f"crew: note: {done.name}'s registration has not reached this home yet "
                         "(it comes through the fleet's relay: fm fleet status)\n")
    return ExitCode.OK


def _bind(target: str) -> tuple[Crew | None, str | None]:
    """The pane *target* names now, as a registration binds it (its id, its program's pid and
    start time), or None with a one-line warning (``{name}`` for the crew's name): the
    registration then keeps the target as given, and is bound when fm first finds the pane."""
    from firstmate.store.crew import Crew
    from firstmate.watch.backends.panes import start_ticks
    from firstmate.watch.backends.tmux import TmuxBackend

    backend = TmuxBackend.from_env(os.environ)
    fact = backend.resolve(target)
    if fact is not None:
        started = None if fact.dead else start_ticks(fact.pid)
        return Crew("", fact.pane, 0.0, target, fact.pid, started), None
    why = " ".join(str(backend.last_error or "").split())[:200].replace("{", "{{").replace(
        "}", "}}")
    if backend.last_exit is None:
        return None, f"crew: note: pane {target} was not checked ({why})"
    return None, (f"crew: warning: tmux has no pane {target} ({why}); {{name}} is registered "
                  f"anyway: start the crew in that pane, or fix it with fm crew add {{name}} "
                  "--pane TARGET --replace")


def _remove(rest: list[str]) -> int:
    from firstmate.app.crewspawn import remove_launch_dir
    from firstmate.store import crew

    ns = parser().commands["remove"].parse(rest)
    home = _home(create=False)
    removed = crew.remove(home, ns.name)
    remove_launch_dir(home, removed.name)  # a spawned crew's own harness config goes too
    sys.stdout.write(f"crew: removed {removed.name}\n")
    return ExitCode.OK


def _answer(rest: list[str]) -> int:
    from firstmate.app.crewops import answer
    from firstmate.base.errors import FirstmateError
    from firstmate.watch.backends.hosts import CrewPanes

    ns = parser().commands["answer"].parse(rest)
    home = _home(create=False)
    done = answer(home, CrewPanes.from_env(home, os.environ), ns.name, ns.key,
                  " ".join(ns.answer), send=ns.send)
    sys.stdout.write(f"crew: answered {ns.name} [key={done.decision.key}]\n")
    if done.unsent is not None:
        raise FirstmateError(f"answer recorded, but typing it into pane {done.pane} failed: "
                             f"{done.unsent}; send it to the crew yourself")
    if done.pane is not None:
        sys.stdout.write(f"crew: sent the answer to pane {done.pane}\n")
    return ExitCode.OK
