"""``fm demo [--keep]``: run the supervised-fleet demo (see firstmate.app.demo)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from firstmate.cli.args import Parser


def parser() -> Parser:
    parser = Parser("fm demo", "Run the demo of a supervised fleet: three scripted crews, a check "
                    "and the primary's continuity engine in a throw-away home, with a watcher "
                    "killed midway. Exit 0 when every invariant held, 1 when any broke.")
    parser.add_argument("--keep", action="store_true",
                        help="leave the demo home on disk afterwards (its path is printed)")
    return parser


def main(argv: Sequence[str]) -> int:
    args = parser().parse(argv)
    from firstmate.app.demo import run_demo

    return run_demo(sys.stdout, keep=args.keep)
