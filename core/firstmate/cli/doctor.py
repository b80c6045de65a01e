"""``fm doctor [--json] [--project DIR] [--fix]``: explain what is missing or broken for this home.

Reads only, unless ``--fix``. Prints one line per finding (``ok``/``warn``/``fail``, the check,
what was found and what fixes it, and whether ``--fix`` may apply that); ``--json`` prints the
same as one object. ``--fix`` first applies every fix that is safe (an install repeated from its
authenticated record, an unusable record file removed, a stopped forwarder started), one line
each, then reports again. Exit 0 when nothing fails, 1 when something does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from firstmate.base.exitcodes import ExitCode
from firstmate.cli.args import Parser

#: A fix that only fm can apply (no other command does it) is printed as this command.
SELF = "fm doctor --fix"


def parser() -> Parser:
    parser = Parser("fm doctor", "Explain what is missing or broken for this home: plugins, each "
                    "harness's installed config and program, the session lock, the watcher, the "
                    "queue, the episode, the last cycles, tmux and the crews' panes, and the "
                    "fleet's processes. Each finding names its fix and whether --fix may apply "
                    "it. Reads only, unless --fix. Exit 1 when a finding is fail.")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object: {"findings": [{check, status, detail, '
                             'fix, safe}...], "failed": true|false} (with --fix, also '
                             '"applied": [{check, fix, ok, said}...])')
    parser.add_argument("--project", metavar="DIR",
                        help="the project whose harness config is checked (default: the current "
                             "directory)")
    parser.add_argument("--fix", action="store_true",
                        help="apply the fixes that are safe (said per finding), print what each "
                             "did, then report again; fixes to make by hand are only printed")
    return parser


def main(argv: Sequence[str]) -> int:
    args = parser().parse(argv)
    project = Path(os.path.expanduser(args.project)) if args.project else None
    from firstmate.app.doctor import apply, diagnose, failed

    findings = diagnose(project=project)
    applied = apply(findings) if args.fix else []
    if args.fix and not args.json:
        for done in applied:
            outcome = "done" if done.ok else "FAILED"
            sys.stdout.write(f"fix   {done.finding.check}  {done.finding.fix}  → {outcome}: "
                             f"{done.said}\n")
    if applied:  # the report is of the home as the fixes left it, in text and JSON alike
        findings = diagnose(project=project)
    if args.json:
        from firstmate.cli import jsonout

        data: dict[str, object] = {"findings": [f.to_dict() for f in findings],
                                   "failed": failed(findings)}
        if args.fix:
            data["applied"] = [done.to_dict() for done in applied]
        jsonout.write(data)
    else:
        if args.fix and not applied:
            sys.stdout.write("fix   nothing to apply: no finding has a safe fix\n")
        width = max(len(f.check) for f in findings)
        for f in findings:
            line = f"{f.status:<4}  {f.check.ljust(width)}  {f.detail}"
            if f.fix == SELF:
                line += f"  → fix: {f.fix}"
            elif f.fix:
                how = "fm doctor --fix applies it" if f.safe else "by hand"
                line += f"  → fix ({how}): {f.fix}"
            sys.stdout.write(line + "\n")
    return ExitCode.FAILED if failed(findings) else ExitCode.OK
