"""``fm doctor [--json] [--project DIR]``: explain what is missing or broken for this home.

Reads only. Prints one line per finding (``ok``/``warn``/``fail``, the check, what was found and
the command that fixes it); ``--json`` prints the same as one object. Exit 0 when nothing
fails, 1 when something does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from firstmate.base.exitcodes import ExitCode
from firstmate.cli.args import Parser


def parser() -> Parser:
    parser = Parser("fm doctor", "Explain what is missing or broken for this home: plugins, each "
                    "harness's installed config, the session lock, the watcher, the queue, the "
                    "episode and the last cycles. Reads only. Exit 1 when a finding is fail.")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object: {"findings": [{check, status, detail, '
                             'fix}...], "failed": true|false}')
    parser.add_argument("--project", metavar="DIR",
                        help="the project whose harness config is checked (default: the current "
                             "directory)")
    return parser


def main(argv: Sequence[str]) -> int:
    args = parser().parse(argv)
    project = Path(os.path.expanduser(args.project)) if args.project else None
    from firstmate.app.doctor import diagnose, failed

    findings = diagnose(project=project)
    if args.json:
        from firstmate.cli import jsonout

        jsonout.write({"findings": [f.to_dict() for f in findings], "failed": failed(findings)})
    else:
        width = max(len(f.check) for f in findings)
        for f in findings:
            line = f"{f.status:<4}  {f.check.ljust(width)}  {f.detail}"
            if f.fix:
                line += f"  → fix: {f.fix}"
            sys.stdout.write(line + "\n")
    return ExitCode.FAILED if failed(findings) else ExitCode.OK
