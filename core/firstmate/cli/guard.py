"""``fm guard [--actor main|branch]``: the pull guard. Always exits 0; silent when all is well.

Other commands (and harness shims) run it to surface a down watcher and queued wakes on stderr:
the WATCHER DOWN banner once per down episode, a one-line reminder afterwards, and the
queued-wake warnings for the calling actor (docs/guards.md).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = "usage: fm guard [--actor main|branch]"


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE + "\n")
        return 0
    actor: str | None = None
    if len(args) == 2 and args[0] == "--actor":
        actor = args[1]
    elif len(args) == 1 and args[0].startswith("--actor="):
        actor = args[0].split("=", 1)[1]
    elif args:
        # A warning tool never fails its caller: say what was wrong and carry on.
        sys.stderr.write(f"fm guard: ignoring unexpected arguments; {USAGE}\n")
    try:
        from firstmate.guards.pull import pull_guard

        text = pull_guard(actor=actor).text
    except Exception as exc:  # always exit 0: the guarded operation must still run
        message = " ".join(str(getattr(exc, "message", exc)).split())[:300]
        text = f"fm guard: could not check supervision ({message}); run fm status\n"
    if text:
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except OSError:
            pass
    return 0
