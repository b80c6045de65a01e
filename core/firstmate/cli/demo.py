"""``fm demo [--keep]``: run the supervised-fleet demo (see firstmate.app.demo)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from firstmate.base.errors import UsageError


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    keep = "--keep" in args
    extra = [a for a in args if a != "--keep"]
    if extra:
        raise UsageError(f"fm demo takes only --keep (keep the demo home), not {extra[0]!r}")
    from firstmate.app.demo import run_demo

    return run_demo(sys.stdout, keep=keep)
