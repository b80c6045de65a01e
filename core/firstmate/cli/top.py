"""``fm top [--once] [--interval SECONDS]``: a live view of the home's fleet.

On a terminal it redraws a panel in place, in colour unless ``NO_COLOR`` is set, and its keys
select a crew to attach to, peek at, steer, answer or stop (:mod:`firstmate.app.top_panel`;
``q`` quits); to a pipe or a file it appends a plain frame whenever the home's state changes;
``--once`` prints one frame and exits. The view itself reads only. What a frame holds and how
changes are noticed: :mod:`firstmate.app.top`.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
from collections.abc import Sequence

from firstmate.base.exitcodes import ExitCode
from firstmate.cli.args import Parser

DESCRIPTION = ("A live view of the fleet: crews with their harness, pane state, open decisions "
               "and last status, the watcher, queue, episode, and the last wakes with their "
               "latencies. On a terminal, keys select a crew to attach to (a), peek at (p), "
               "steer (s), answer (d) or stop (x); q quits.")


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text[:40]!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"the interval must be a positive number of seconds, "
                                         f"not {text[:40]!r}")
    return value


def parser() -> Parser:
    from firstmate.app.top_screen import DEFAULT_INTERVAL

    parser = Parser("fm top", DESCRIPTION)
    parser.add_argument("--once", action="store_true",
                        help="print one plain frame and exit (a script reads fm status --json)")
    parser.add_argument("--interval", type=_interval, default=DEFAULT_INTERVAL, metavar="SECONDS",
                        help="redraw at least this often even when nothing changed "
                             f"(default {DEFAULT_INTERVAL:g}); changes are drawn within 0.1 s")
    return parser


def _width() -> int:
    return shutil.get_terminal_size((100, 24)).columns


def main(argv: Sequence[str]) -> int:
    from firstmate.app.demo_panel import wants_live_view
    from firstmate.app.top import Gatherer
    from firstmate.app.top_screen import run_plain, run_screen
    from firstmate.app.top_view import render
    from firstmate.store.home import resolve_root

    args = parser().parse(argv)
    env = dict(os.environ)
    gatherer = Gatherer(resolve_root(env), env)
    if args.once:
        try:
            frame = gatherer.gather()
        finally:
            gatherer.close()
        sys.stdout.write("\n".join(render(frame, _width())) + "\n")
        return ExitCode.OK
    if wants_live_view(sys.stdout, env):
        keys = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
        sys.stdout.flush()
        colour = not env.get("NO_COLOR", "")
        return run_screen(gatherer, sys.stdout.fileno(), keys, interval=args.interval,
                          colour=colour)
    return run_plain(gatherer, sys.stdout, interval=args.interval, width=_width)
