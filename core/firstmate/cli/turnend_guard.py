"""``fm turnend-guard --harness H [--home DIR] [--no-wait]``: the turn-end guard, payload on stdin.

Exit 0 lets the turn end (silent, except the loud notice of an attended fail-open on stderr);
exit 2 with a banner on stderr blocks it; a follow-up harness gets exit 0 with the one follow-up
message on stdout, as the harness's ``GuardProfile.style`` says. See docs/guards.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

USAGE = "usage: fm turnend-guard --harness HARNESS [--home DIR] [--no-wait]   (payload on stdin)"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def _args(argv: Sequence[str]) -> tuple[str, str | None, bool]:
    from firstmate.base.errors import UsageError

    harness: str | None = None
    home: str | None = None
    wait = True
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("--harness", "--home") and i + 1 < len(words):
            if word == "--harness":
                harness = words[i + 1]
            else:
                home = words[i + 1]
            i += 2
            continue
        if word.startswith("--harness="):
            harness = word.split("=", 1)[1]
        elif word.startswith("--home="):
            home = word.split("=", 1)[1]
        elif word == "--no-wait":
            wait = False
        else:
            raise UsageError(f"unexpected argument {word[:40]!r}; {USAGE}")
        i += 1
    if not harness or not set(harness) <= _NAME_CHARS:
        raise UsageError(USAGE)
    if home is not None and not home:
        raise UsageError(f"--home needs a directory; {USAGE}")
    return harness, home, wait


def main(argv: Sequence[str]) -> int:
    if list(argv[:1]) in (["-h"], ["--help"]):
        sys.stdout.write(USAGE + "\n")
        return 0
    from firstmate.base.errors import UsageError

    try:
        harness, home_arg, wait = _args(argv)
    except UsageError as exc:
        # Exit 2 means "block" to the harnesses that run this: a broken hook command must
        # never wedge every turn end, so bad arguments exit 1 (a non-blocking hook error).
        sys.stderr.write(f"fm: {exc.message}\n")
        return 1
    env = os.environ
    if home_arg is not None:
        env["FM_HOME"] = os.path.abspath(os.path.expanduser(home_arg))
    from firstmate.cli.hook import _timeout, parse_payload, read_payload
    from firstmate.guards.turnend import turnend_decision

    payload = parse_payload(read_payload(0, timeout=_timeout(env)))
    outcome = turnend_decision(harness, payload, env=env, wait=wait).hook_outcome()
    if outcome.stdout:
        sys.stdout.write(outcome.stdout)
        sys.stdout.flush()
    if outcome.stderr:
        sys.stderr.write(outcome.stderr)
        sys.stderr.flush()
    return int(outcome.exit_code)
