"""``fm crew spawn``, ``steer``, ``stop``, ``list``, ``peek`` and ``attach``: a fleet of crews in
tmux windows.

:mod:`firstmate.cli.crew` declares these in its parser with :func:`declare` and dispatches them
here with that parser (this module never imports it back); the work is done in the app layer
(:mod:`firstmate.app.crewspawn`, :mod:`firstmate.app.crewops`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from firstmate.base.errors import StateError, UsageError
from firstmate.base.exitcodes import ExitCode
from firstmate.store.home import Home

if TYPE_CHECKING:
    from firstmate.app.crewremote import Remote
    from firstmate.cli.args import Parser
    from firstmate.watch.backends.hosts import CrewPanes

COMMANDS = ("spawn", "steer", "stop", "list", "peek", "attach")
SPAWN_USAGE = ("fm crew spawn NAME --harness H [--host HOST] [--cwd DIR] [--worktree BRANCH] "
               "[--window-name W] [--session S] [--harness-arg ARG]... [--fm-command CMD] "
               "[--prompt-file FILE] [-- PROMPT...]")


def declare(parser: Parser, name_help: str) -> None:
    """Add spawn, steer, stop, list, peek and attach to ``fm crew``'s *parser*."""
    spawn = parser.add_command(
        "spawn", "start harness H as crew NAME in a new tmux window, registered, briefed with "
        "the reporting protocol, its turn ends recorded", usage=SPAWN_USAGE,
        epilog="The task (the crew's first prompt) is every word after --, and --prompt-file's "
               "text before it. See docs/fleet.md.")
    spawn.add_argument("name", metavar="NAME", help=name_help)
    spawn.add_argument("--harness", required=True, metavar="H",
                       help="the harness plugin that starts the crew (fm plugins lists them)")
    spawn.add_argument("--host", metavar="HOST",
                       help="start it on fleet host HOST over SSH (fm fleet host add HOST --ssh "
                            "…), named HOST.NAME here; --cwd is a directory there")
    spawn.add_argument("--cwd", type=Path, metavar="DIR",
                       help="the crew's directory (default: this one); with --worktree, the "
                            "repository the worktree is made from")
    spawn.add_argument("--worktree", metavar="BRANCH",
                       help="work in a new git worktree of BRANCH (made from HEAD when new) at "
                            "<home>/worktrees/NAME")
    spawn.add_argument("--window-name", metavar="W", help="the tmux window's name (default: NAME)")
    spawn.add_argument("--session", metavar="S",
                       help="the tmux session (default: $FM_CREW_SESSION, else firstmate; made "
                            "when missing)")
    spawn.add_argument("--harness-arg", action="append", default=[], metavar="ARG",
                       help="one more argument for the harness, before the prompt (repeat it; "
                            "write --harness-arg=--x for one that starts with -)")
    spawn.add_argument("--fm-command", metavar="CMD",
                       help="the fm the crew's hooks and brief run (default: this "
                            "installation's, by absolute path)")
    spawn.add_argument("--prompt-file", metavar="FILE",
                       help="read the task from FILE (- reads stdin)")
    steer = parser.add_command("steer", "type an instruction into the crew's pane (one line, "
                               "then Enter); refused when the pane is gone")
    steer.add_argument("name", metavar="NAME", help=name_help)
    steer.add_argument("text", nargs="+", metavar="TEXT",
                       help="the instruction (words are joined)")
    stop = parser.add_command("stop", "end the crew's pane and unregister it, keeping its status "
                              "log and last screen")
    stop.add_argument("name", metavar="NAME", help=name_help)
    listing = parser.add_command("list", "one line per crew: name, harness, pane and its state, "
                                 "age of the last status line, the line, open decisions")
    listing.add_argument("--json", action="store_true",
                         help='print one JSON object: {"crews": [{name, pane, label, added_at, '
                              'harness, pane_state, last_status, open_decisions}...]}')
    peek = parser.add_command("peek", "print the last lines of the crew's screen (its pane, "
                              "scrollback included), cleaned; refused when the pane is not the "
                              "crew's")
    peek.add_argument("name", metavar="NAME", help=name_help)
    peek.add_argument("-n", "--lines", type=_lines, default=None, metavar="N",
                      help="how many lines (1-1000, default 20)")
    attach = parser.add_command("attach", "bring the crew's pane to this terminal: switch this "
                                "tmux client to it, or attach to its tmux server "
                                "(FM_TMUX_SOCKET)")
    attach.add_argument("name", metavar="NAME", help=name_help)


def _lines(text: str) -> int:
    from firstmate.watch.backends.screen import MAX_LINES

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of lines: {text[:40]!r}") from None
    if not 1 <= value <= MAX_LINES:
        raise argparse.ArgumentTypeError(f"the number of lines must be 1 to {MAX_LINES}, not "
                                         f"{text[:40]!r}")
    return value


def main(command: str, argv: Sequence[str], parser: Parser) -> int:
    """Run ``fm crew <command>`` (one of :data:`COMMANDS`) with ``fm crew``'s *parser*."""
    handler = {"spawn": _spawn, "steer": _steer, "stop": _stop, "list": _list, "peek": _peek,
               "attach": _attach}[command]
    return handler(list(argv), parser.commands[command])


def _home(*, create: bool) -> Home:
    from firstmate.store.home import open_home

    return open_home(os.environ, create=create)


def _backend(home: Home) -> CrewPanes:
    from firstmate.watch.backends.hosts import CrewPanes

    return CrewPanes.from_env(home, os.environ)


# --- spawn -------------------------------------------------------------------------------------


def _prompt(ns: argparse.Namespace, words: list[str]) -> str:
    text = " ".join(words)
    if ns.prompt_file:
        if ns.prompt_file == "-":
            given = sys.stdin.read()
        else:
            try:
                given = Path(ns.prompt_file).read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise UsageError(f"cannot read --prompt-file {ns.prompt_file}: "
                                 f"{exc.strerror}") from exc
        text = "\n\n".join(part for part in (given.strip(), text) if part)
    return text


def _spawn(rest: list[str], parser: Parser) -> int:
    from firstmate.app.crewspawn import SpawnRequest, spawn

    # The task is everything after the first --, taken apart from the options by hand: argparse
    # cannot tell a task's words from the positional NAME given before the options.
    cut = rest.index("--") if "--" in rest else len(rest)
    ns = parser.parse(rest[:cut])
    fm_argv = tuple(shlex.split(ns.fm_command)) if ns.fm_command else ()
    if ns.fm_command is not None and not fm_argv:
        raise parser.usage_error("empty --fm-command: give the fm the crew should run")
    if ns.host is not None:
        return _spawn_there(ns, fm_argv, _prompt(ns, rest[cut + 1:]))
    request = SpawnRequest(name=ns.name, harness=ns.harness, task=_prompt(ns, rest[cut + 1:]),
                           cwd=ns.cwd, worktree=ns.worktree, window_name=ns.window_name,
                           session=ns.session, fm_argv=fm_argv,
                           harness_args=tuple(ns.harness_arg))
    done = spawn(_home(create=True), request, os.environ)
    sys.stdout.write(f"crew: spawned {done.name} ({done.harness}) in pane {done.pane}, window "
                     f"{done.session}:{done.window}\n")
    place = f"a new worktree of branch {request.worktree} at " if done.worktree else ""
    sys.stdout.write(f"crew: working in {place}{done.cwd}\n")
    sys.stdout.write(f"crew: it reports with fm crew status {done.name} and its harness records "
                     f"every turn end; steer it with fm crew steer {done.name} \"…\"\n")
    for note in done.notes:
        sys.stdout.write(f"note: {note}\n")
    return ExitCode.OK


def _spawn_there(ns: argparse.Namespace, fm_argv: tuple[str, ...], task: str) -> int:
    """``fm crew spawn NAME --host HOST …``: the same spawn, run by the fm on that host."""
    from firstmate.app.crewremote import spawn

    options = ["--harness", ns.harness]
    for flag, value in (("--cwd", ns.cwd), ("--worktree", ns.worktree),
                        ("--window-name", ns.window_name), ("--session", ns.session)):
        if value is not None:
            options += [flag, str(value)]
    options += [f"--harness-arg={arg}" for arg in ns.harness_arg]
    if fm_argv:
        options += ["--fm-command", shlex.join(fm_argv)]
    home = _home(create=True)
    done = spawn(home, os.environ, ns.host, ns.name, options, task)
    _say_remote(done)
    if done.registered:
        sys.stdout.write(f"crew: {done.name} is registered here (pane {done.host}:{done.pane}); "
                         f"steer it with fm crew steer {done.name} \"…\"\n")
    return ExitCode.OK


def _say_remote(done: Remote) -> None:
    for note in done.notes:
        sys.stdout.write(f"fleet: {note}\n")
    for line in done.said:
        sys.stdout.write(f"{done.host}: {line}\n")
    if not done.registered:
        sys.stdout.write(f"crew: note: {done.name}'s registration has not reached this home yet "
                         "(it comes through the fleet's relay: fm fleet status)\n")


# --- steer and stop ----------------------------------------------------------------------------


def _steer(rest: list[str], parser: Parser) -> int:
    from firstmate.app.crewops import steer

    ns = parser.parse(rest)
    home = _home(create=False)
    done = steer(home, _backend(home), ns.name, " ".join(ns.text))
    sys.stdout.write(f"crew: sent to {done.name} (pane {done.pane})\n")
    return ExitCode.OK


def _stop(rest: list[str], parser: Parser) -> int:
    from firstmate.app.crewops import stop

    ns = parser.parse(rest)
    home = _home(create=False)
    done = stop(home, _backend(home), ns.name)
    ended = f"ended pane {done.pane}" if done.killed else f"pane {done.pane} was already gone"
    kept = f"; its last screen is in {done.pane_log}" if done.pane_log else ""
    sys.stdout.write(f"crew: stopped {done.name} ({ended}){kept}; its status log stays\n")
    if done.note:
        sys.stderr.write(f"crew: note: {done.note}\n")
    return ExitCode.OK


# --- list --------------------------------------------------------------------------------------


def _list(rest: list[str], parser: Parser) -> int:
    import time

    from firstmate.app.crewops import age_text, rows
    from firstmate.store import crew
    from firstmate.store.home import resolve_root

    ns = parser.parse(rest)
    try:
        home: Home | None = _home(create=False)
    except StateError:
        if os.path.isdir(resolve_root(os.environ)):
            raise
        home = None  # no home yet: nothing is registered
    found = rows(home, _backend(home)) if home is not None else []
    now = time.time()
    if ns.json:
        from firstmate.cli import jsonout

        jsonout.write({"crews": [row.as_json(now) for row in found]})
        return ExitCode.OK
    if not found:
        sys.stdout.write("no crews registered; start one with fm crew spawn NAME --harness H, "
                         "or register one with fm crew add NAME --pane TARGET\n")
        return ExitCode.OK
    for row in found:
        text = row.last_text if row.last_text is not None else "(no status yet)"
        flag = f"  [{row.open_decisions} open decision(s)]" if row.open_decisions else ""
        sys.stdout.write(f"{row.name}\t{row.harness or '-'}\t{crew.clean_text(row.shown)} "
                         f"{row.pane_state}\t"
                         f"{age_text(row.age(now))}\t{crew.cut(text, 160)}{flag}\n")
    return ExitCode.OK


# --- peek and attach ---------------------------------------------------------------------------


def _peek(rest: list[str], parser: Parser) -> int:
    from firstmate.app.crewlook import DEFAULT_PEEK_LINES, peek
    from firstmate.watch.backends.tmux import DEAD

    ns = parser.parse(rest)
    home = _home(create=False)
    shown = peek(home, _backend(home), ns.name, ns.lines or DEFAULT_PEEK_LINES)
    sys.stdout.write("".join(line + "\n" for line in shown.lines))
    if shown.state == DEAD:
        sys.stderr.write(f"crew: note: the harness in {shown.name}'s pane {shown.pane} has "
                         "ended; this is its last screen\n")
    return ExitCode.OK


def _attach(rest: list[str], parser: Parser) -> int:
    import subprocess

    from firstmate.app.crewlook import attach
    from firstmate.base.errors import FirstmateError

    ns = parser.parse(rest)
    home = _home(create=False)
    backend = _backend(home)
    terminal = sys.stdin is not None and sys.stdin.isatty()
    plan = attach(home, backend, ns.name, os.environ, terminal=terminal)
    for note in plan.notes():
        sys.stderr.write(note + "\n")
    if not plan.takes_terminal:
        try:
            done = subprocess.run(plan.argv, env=dict(plan.env), stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=backend.local.timeout,
                                  check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise FirstmateError(f"cannot run tmux to switch to crew {plan.name!r}: {exc}; check "
                                 "FM_TMUX") from exc
        if done.returncode != 0:
            said = " ".join(done.stderr.decode("utf-8", "replace").split())[:200]
            raise FirstmateError(f"tmux could not switch this client to crew {plan.name!r}'s "
                                 f"pane {plan.pane}: {said or 'it exited ' + str(done.returncode)}"
                                 f"; run fm crew attach {plan.name} from a terminal outside tmux")
        sys.stdout.write(f"crew: switched this tmux client to {plan.name} (pane {plan.pane})\n")
        return ExitCode.OK
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(plan.argv[0], list(plan.argv), dict(plan.env))
    except OSError as exc:
        what = "ssh" if plan.host else "tmux"
        fix = "set FM_SSH to the ssh client" if plan.host else "set FM_TMUX to the tmux binary"
        raise FirstmateError(f"cannot run {what} ({plan.argv[0]}): {exc.strerror}; {fix}") from exc
