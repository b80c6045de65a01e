"""``fm arm``: start or attach to a watcher cycle and print its reason (see firstmate.arm)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from firstmate.exitcodes import ExitCode


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args[:1] in (["-h"], ["--help"]):
        from firstmate.armargs import USAGE

        sys.stdout.write(USAGE + "\n")
        return ExitCode.OK
    from firstmate.arm import run

    return run(args)
