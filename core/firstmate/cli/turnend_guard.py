"""``fm turnend-guard --harness H [--home DIR] [--no-wait]``: the turn-end guard, payload on stdin.

Exit 0 lets the turn end (silent, except the loud notice of an attended fail-open on stderr);
exit 2 with a banner on stderr blocks it; a follow-up harness gets exit 0 with the one follow-up
message on stdout, as the harness's ``GuardProfile.style`` says. See docs/guards.md.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn

    from firstmate.cli.args import Parser

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def parser() -> Parser:
    """The command line as help and errors describe it; parsed by hand in :func:`_args` (a hot
    path: every turn end), which builds this only for ``--help`` or a wrong command line."""
    from firstmate.cli.args import Parser

    parser = Parser("fm turnend-guard", "Turn-end backstop, run by a harness's turn-end hook with "
                    "the hook payload on stdin: exit 0 lets the turn end, exit 2 with a banner "
                    "on stderr blocks it (a follow-up harness gets one message on stdout). Bad "
                    "arguments exit 1, never 2, which harnesses read as block.")
    parser.add_argument("--harness", required=True, metavar="HARNESS",
                        help="the harness whose turn is ending (its plugin's guard profile "
                             "decides block or follow-up)")
    parser.add_argument("--home", metavar="DIR",
                        help="the Firstmate home (becomes FM_HOME for this call)")
    parser.add_argument("--no-wait", action="store_true",
                        help="do not wait for the auto-arm's proof before deciding (harnesses "
                             "with a re-arm ledger wait up to their sync wait otherwise)")
    return parser


def _refuse(argv: Sequence[str], message: str) -> NoReturn:
    parser().refuse(argv, message)


def _args(argv: Sequence[str]) -> tuple[str, str | None, bool]:
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
            _refuse(argv, f"unrecognized arguments: {word}")
        i += 1
    if not harness or not set(harness) <= _NAME_CHARS:
        _refuse(argv, "--harness needs a harness name (lower-case letters, digits, - and _)")
    if home is not None and not home:
        _refuse(argv, "--home needs a directory")
    return harness, home, wait


def main(argv: Sequence[str]) -> int:
    from firstmate.base.errors import UsageError

    try:
        harness, home_arg, wait = _args(argv)
    except UsageError as exc:
        # Exit 2 means "block" to the harnesses that run this: a broken hook command must
        # never wedge every turn end, so bad arguments exit 1 (a non-blocking hook error).
        sys.stderr.write(f"fm: {' '.join(exc.message.split())}\n")
        return 1
    env = os.environ
    if home_arg is not None:
        env["FM_HOME"] = os.path.abspath(os.path.expanduser(home_arg))
    from firstmate.cli.hook import _timeout, emit, parse_payload, read_payload
    from firstmate.guards.turnend import turnend_decision

    payload = parse_payload(read_payload(0, timeout=_timeout(env)))
    return emit(turnend_decision(harness, payload, env=env, wait=wait).hook_outcome())
