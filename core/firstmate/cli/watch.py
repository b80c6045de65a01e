"""``fm watch``: run one watcher cycle in this process (normally started by ``fm arm``)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence

from firstmate.cli.args import Parser


def parser() -> Parser:
    return Parser("fm watch", "Run one watcher cycle in the foreground and print its reason line. "
                  "Use fm arm instead: it starts the watcher as a tracked child and confirms it.")


def main(argv: Sequence[str]) -> int:
    parser().parse(argv)
    from firstmate.watch import watcher

    status = watcher.run()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        # stdout's reader went away (the arm died): say nothing more on the way out.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    return status
