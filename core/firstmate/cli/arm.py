"""``fm arm``: start or attach to a watcher cycle and print its reason (see firstmate.continuity.arm)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from firstmate.base.exitcodes import ExitCode


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args[:1] in (["-h"], ["--help"]):
        from firstmate.continuity.armargs import USAGE

        sys.stdout.write(USAGE + "\n")
        return ExitCode.OK
    from firstmate.continuity.armrun import run

    return run(args)
