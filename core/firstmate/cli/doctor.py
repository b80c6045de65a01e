"""``fm doctor [--json] [--project DIR]``: explain what is missing or broken for this home.

Reads only. Prints one line per finding (``ok``/``warn``/``fail``, the check, what was found and
the command that fixes it); ``--json`` prints the same as a list of objects. Exit 0 when nothing
fails, 1 when something does.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from firstmate.base.errors import UsageError
from firstmate.base.exitcodes import ExitCode

USAGE = "usage: fm doctor [--json] [--project DIR]"


def _parse(argv: Sequence[str]) -> tuple[bool, Path | None]:
    as_json = False
    project: Path | None = None
    args = list(argv)
    while args:
        word = args.pop(0)
        if word == "--json":
            as_json = True
        elif word == "--project" and args:
            project = Path(os.path.expanduser(args.pop(0)))
        elif word.startswith("--project="):
            project = Path(os.path.expanduser(word.partition("=")[2]))
        else:
            raise UsageError(f"unexpected argument {word[:60]!r}; {USAGE}")
    return as_json, project


def main(argv: Sequence[str]) -> int:
    if list(argv[:1]) in (["-h"], ["--help"]):
        sys.stdout.write(USAGE + "\n")
        return ExitCode.OK
    as_json, project = _parse(argv)
    from firstmate.app.doctor import diagnose, failed

    findings = diagnose(project=project)
    if as_json:
        sys.stdout.write(json.dumps([f.to_dict() for f in findings]) + "\n")
    else:
        width = max(len(f.check) for f in findings)
        for f in findings:
            line = f"{f.status:<4}  {f.check.ljust(width)}  {f.detail}"
            if f.fix:
                line += f"  → fix: {f.fix}"
            sys.stdout.write(line + "\n")
    return ExitCode.FAILED if failed(findings) else ExitCode.OK
