"""``fm crew spawn``, ``steer``, ``stop`` and ``list``: a fleet of crews in tmux windows.

:mod:`firstmate.cli.crew` dispatches these here; the work is done in the app layer
(:mod:`firstmate.app.crewspawn`, :mod:`firstmate.app.crewops`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from firstmate.base.errors import StateError, UsageError
from firstmate.base.exitcodes import ExitCode
from firstmate.store.home import Home

if TYPE_CHECKING:
    from firstmate.watch.backends.tmux import TmuxBackend

COMMANDS = ("spawn", "steer", "stop", "list")
USAGE = {
    "spawn": ("fm crew spawn NAME --harness H [--cwd DIR] [--worktree BRANCH] "
              "[--window-name W] [--session S] [--harness-arg ARG]... [--fm-command CMD] "
              "[--prompt-file FILE] [-- PROMPT...]"),
    "steer": 'fm crew steer NAME "instruction"',
    "stop": "fm crew stop NAME",
    "list": "fm crew list [--json]",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}; run {self.prog} --help")


def _parser(command: str, description: str) -> argparse.ArgumentParser:
    return _Parser(prog=f"fm crew {command}", usage=USAGE[command], description=description)


def _home(*, create: bool) -> Home:
    from firstmate.store.home import open_home

    return open_home(os.environ, create=create)


def _backend() -> TmuxBackend:
    from firstmate.watch.backends.tmux import TmuxBackend

    return TmuxBackend.from_env(os.environ)


def main(command: str, argv: Sequence[str]) -> int:
    handler = {"spawn": _spawn, "steer": _steer, "stop": _stop, "list": _list}[command]
    return handler(list(argv))


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


def _spawn(rest: list[str]) -> int:
    from firstmate.app.crewspawn import SpawnRequest, spawn

    parser = _parser("spawn", "Start harness H as crew NAME in a new tmux window, registered, "
                              "briefed with the reporting protocol, its turn ends recorded.")
    parser.add_argument("name")
    parser.add_argument("--harness", required=True, help="the harness plugin to start (fm plugins)")
    parser.add_argument("--cwd", type=Path, help="the crew's directory (default: this one); "
                                                 "with --worktree, the repository")
    parser.add_argument("--worktree", metavar="BRANCH",
                        help="work in a new git worktree of BRANCH at <home>/worktrees/NAME")
    parser.add_argument("--window-name", help="the tmux window's name (default: NAME)")
    parser.add_argument("--session", help="the tmux session (default: $FM_CREW_SESSION, else "
                                          "firstmate; created when missing)")
    parser.add_argument("--harness-arg", action="append", default=[], metavar="ARG",
                        help="one more argument for the harness (repeat; --harness-arg=--x=y)")
    parser.add_argument("--fm-command", help="the fm the crew runs (default: this installation's)")
    parser.add_argument("--prompt-file", metavar="FILE", help="read the task from FILE (- = stdin)")
    parser.epilog = "The task (the crew's first prompt) follows --."
    # The task is everything after the first --, taken apart from the options by hand: argparse
    # cannot tell a task's words from a positional NAME given before the options.
    cut = rest.index("--") if "--" in rest else len(rest)
    ns = parser.parse_args(rest[:cut])
    words = rest[cut + 1:]
    fm_argv = tuple(shlex.split(ns.fm_command)) if ns.fm_command else ()
    if ns.fm_command is not None and not fm_argv:
        raise UsageError("empty --fm-command; give the fm the crew should run")
    request = SpawnRequest(name=ns.name, harness=ns.harness, task=_prompt(ns, words), cwd=ns.cwd,
                           worktree=ns.worktree, window_name=ns.window_name, session=ns.session,
                           fm_argv=fm_argv, harness_args=tuple(ns.harness_arg))
    done = spawn(_home(create=True), request, os.environ)
    where = f"{done.session}:{done.window}"
    sys.stdout.write(f"crew: spawned {done.name} ({done.harness}) in pane {done.pane}, "
                     f"window {where}\n")
    place = f"a new worktree of branch {request.worktree} at " if done.worktree else ""
    sys.stdout.write(f"crew: working in {place}{done.cwd}\n")
    sys.stdout.write(f"crew: it reports with fm crew status {done.name} and its harness records "
                     f"every turn end; steer it with fm crew steer {done.name} \"…\"\n")
    for note in done.notes:
        sys.stdout.write(f"note: {note}\n")
    return ExitCode.OK


# --- steer and stop ----------------------------------------------------------------------------


def _steer(rest: list[str]) -> int:
    from firstmate.app.crewops import steer

    parser = _parser("steer", "Type an instruction into the crew's pane (literally, then Enter).")
    parser.add_argument("name")
    parser.add_argument("text", nargs="+")
    ns = parser.parse_args(rest)
    done = steer(_home(create=False), _backend(), ns.name, " ".join(ns.text))
    sys.stdout.write(f"crew: sent to {done.name} (pane {done.pane})\n")
    return ExitCode.OK


def _stop(rest: list[str]) -> int:
    from firstmate.app.crewops import stop

    parser = _parser("stop", "End the crew's pane and unregister it, keeping its logs.")
    parser.add_argument("name")
    ns = parser.parse_args(rest)
    done = stop(_home(create=False), _backend(), ns.name)
    ended = f"ended pane {done.pane}" if done.killed else f"pane {done.pane} was already gone"
    kept = f"; its last screen is in {done.pane_log}" if done.pane_log else ""
    sys.stdout.write(f"crew: stopped {done.name} ({ended}){kept}; its status log stays\n")
    return ExitCode.OK


# --- list --------------------------------------------------------------------------------------


def _list(rest: list[str]) -> int:
    import json
    import time

    from firstmate.app.crewops import age_text, rows
    from firstmate.store import crew
    from firstmate.store.home import resolve_root

    parser = _parser("list", "One line per crew: harness, pane and its state, age of the last "
                             "status line, the line itself, open decisions.")
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args(rest)
    try:
        home: Home | None = _home(create=False)
    except StateError:
        if os.path.isdir(resolve_root(os.environ)):
            raise
        home = None  # no home yet: nothing is registered
    found = rows(home, _backend()) if home is not None else []
    now = time.time()
    if ns.json:
        sys.stdout.write(json.dumps([row.as_json(now) for row in found], indent=1) + "\n")
        return ExitCode.OK
    if not found:
        sys.stdout.write("no crews registered; start one with fm crew spawn NAME --harness H, "
                         "or register one with fm crew add NAME --pane TARGET\n")
        return ExitCode.OK
    for row in found:
        text = row.last_text if row.last_text is not None else "(no status yet)"
        flag = f"  [{row.open_decisions} open decision(s)]" if row.open_decisions else ""
        sys.stdout.write(f"{row.name}\t{row.harness or '-'}\t{row.pane} {row.pane_state}\t"
                         f"{age_text(row.age(now))}\t{crew.cut(text, 160)}{flag}\n")
    return ExitCode.OK
