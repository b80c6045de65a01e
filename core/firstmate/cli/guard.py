"""``fm guard [--actor main|branch]``: the pull guard. Always exits 0; silent when all is well.

Other commands (and harness shims) run it to surface a down watcher and queued wakes on stderr:
the WATCHER DOWN banner once per down episode, a one-line reminder afterwards, and the
queued-wake warnings for the calling actor (docs/guards.md).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from firstmate.cli.args import Parser


def parser() -> Parser:
    """The command line as help and errors describe it; parsed by hand in :func:`main` (a hot
    path: harness hooks and shims run it), which builds this only for ``--help`` or an error."""
    from firstmate.cli.args import Parser

    parser = Parser("fm guard", "Pull guard: on stderr, the WATCHER DOWN banner once per down "
                    "episode and a one-line reminder afterwards while supervision is needed and no "
                    "healthy watcher runs, and the queued-wake warnings for this actor. Always "
                    "exit 0; silent when all is well.")
    parser.add_argument("--actor", choices=("main", "branch"),
                        help="whose queued wakes to warn about (default: $FM_SUPERVISION_ACTOR, "
                             "else main)")
    return parser


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    actor: str | None = None
    if len(args) == 2 and args[0] == "--actor":
        actor = args[1]
    elif len(args) == 1 and args[0].startswith("--actor="):
        actor = args[0].split("=", 1)[1]
    elif args:
        from firstmate.base.errors import UsageError

        try:
            parser().refuse(args, f"unexpected arguments {' '.join(args)[:60]!r}")
        except UsageError as exc:
            # A warning tool never fails its caller: say what was wrong and carry on.
            sys.stderr.write("fm: " + exc.message.replace("; run", " (ignored); run", 1) + "\n")
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
