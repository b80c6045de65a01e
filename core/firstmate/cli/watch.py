"""``fm watch``: run one watcher cycle in this process (normally started by ``fm arm``)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence

from firstmate.base.errors import UsageError
from firstmate.base.exitcodes import ExitCode

USAGE = "usage: fm watch   (one watcher cycle; start it with fm arm)"


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE + "\n")
        return ExitCode.OK
    if args:
        raise UsageError(USAGE)
    from firstmate.watch import watcher

    status = watcher.run()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        # stdout's reader went away (the arm died): say nothing more on the way out.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    return status
