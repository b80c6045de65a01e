"""``fm arm``: start or attach to a watcher cycle and print its reason (see firstmate.continuity.arm)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from firstmate.cli.args import Parser


def parser() -> Parser:
    parser = Parser(
        "fm arm", "Start a watcher cycle, or attach to the live one, and print its reason line. "
        "Exits 0 only after printing a reason line (--stop and --handling-delivered excepted); "
        "every other end is one 'watcher: FAILED - ...' line.",
        usage="fm arm [-h] [--restart | --stop | --take-over [ARM_PID] | "
              "--handling-delivered GEN --watcher-pid PID]")
    modes = parser.add_mutually_exclusive_group()
    # --arm: the default mode spelt out, kept for older callers.
    modes.add_argument("--arm", action="store_true", help=argparse.SUPPRESS)
    modes.add_argument("--restart", action="store_true",
                       help="stop the current identity-verified watcher, then start a fresh cycle")
    modes.add_argument("--stop", action="store_true",
                       help="stop the current identity-verified watcher and exit 0 with one "
                            "status line (read by its exit status: 0 stopped or none running, "
                            "1 failed)")
    modes.add_argument("--take-over", nargs="?", const=True, metavar="ARM_PID",
                       help="stop the watcher the arm ARM_PID started (any watcher without "
                            "ARM_PID) and own a fresh cycle")
    modes.add_argument("--handling-delivered", metavar="GEN",
                       help="confirm a continuity handoff: the episode of generation GEN moves "
                            "to handling (needs --watcher-pid)")
    parser.add_argument("--watcher-pid", metavar="PID",
                        help="with --handling-delivered: the live watcher that carries it")
    return parser


def canonical(argv: Sequence[str]) -> list[str]:
    """*argv* as the mode words :func:`firstmate.continuity.armargs.parse_args` reads (which
    checks the pid and generation values); help and malformed command lines end here."""
    command = parser()
    args = command.parse(argv)
    if args.watcher_pid is not None and args.handling_delivered is None:
        raise command.usage_error("--watcher-pid goes with --handling-delivered GEN")
    if args.handling_delivered is not None:
        if args.watcher_pid is None:
            raise command.usage_error("--handling-delivered needs --watcher-pid PID")
        return ["--handling-delivered", args.handling_delivered, "--watcher-pid", args.watcher_pid]
    if args.take_over is not None:
        return ["--take-over", *([] if args.take_over is True else [args.take_over])]
    return ["--restart"] if args.restart else ["--stop"] if args.stop else []


def main(argv: Sequence[str]) -> int:
    words = canonical(argv)
    from firstmate.continuity.armrun import run

    return run(words)
