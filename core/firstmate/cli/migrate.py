"""``fm migrate --from-legacy DIR [--json]``: import an original firstmate home's queue state."""

from __future__ import annotations

import os
import sys

from firstmate.cli.args import Parser


def parser() -> Parser:
    parser = Parser("fm migrate", "Import the durable queue state (.wake-queue, its sequence "
                    "counter and .watcher-down) of an original firstmate home. Importing again "
                    "adds nothing.")
    parser.add_argument("--from-legacy", required=True, metavar="DIR",
                        help="the original home (its state/ is used) or its state directory")
    parser.add_argument("--json", action="store_true",
                        help="print the summary as one JSON object (source, imported, renumbered, "
                             "retired, skipped, episode, sequence, refused_counter)")
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse(argv)
    if not args.from_legacy:
        raise parser().usage_error("--from-legacy needs a directory")

    from firstmate.store.database import open_store
    from firstmate.store.home import open_home
    from firstmate.store.migrate import import_legacy

    report = import_legacy(open_store(open_home(os.environ)), os.path.expanduser(args.from_legacy))
    if args.json:
        from firstmate.cli import jsonout

        jsonout.write(report.to_json())
    else:
        sys.stdout.write("".join(line + "\n" for line in report.lines()))
    return 0
