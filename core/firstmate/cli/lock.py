"""``fm lock acquire|status|release``: the primary session lock (see firstmate.continuity.session_lock).

Refusals print one ``error: …`` line on stderr, as the harness instructions quote them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from firstmate.base.errors import FirstmateError, StateError, UsageError
from firstmate.base.exitcodes import ExitCode
from firstmate.store.home import Home, open_home, resolve_root

USAGE = """usage: fm lock acquire
       fm lock status [--json]
       fm lock release"""


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE + "\n")
        return ExitCode.OK if args else ExitCode.USAGE
    command, rest = args[0], args[1:]
    if rest[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE + "\n")
        return ExitCode.OK
    try:
        if command == "status":
            return _status(rest)
        if rest:
            raise UsageError(f"fm lock {command} takes no arguments; run fm lock --help")
        if command == "acquire":
            return _acquire()
        if command == "release":
            return _release()
        raise UsageError(f"unknown lock command {command!r}; run fm lock --help")
    except FirstmateError as exc:
        sys.stderr.write("error: " + " ".join(exc.message.split()) + "\n")
        return int(exc.exit_code)


def _acquire() -> int:
    from firstmate.continuity import session_lock

    result = session_lock.acquire(open_home(os.environ), os.environ)
    sys.stdout.write(result.line + "\n")
    return ExitCode.OK


def _existing_home() -> Home | None:
    try:
        return open_home(os.environ, create=False)
    except StateError:
        if os.path.lexists(resolve_root(os.environ)):
            raise
        return None


def _release() -> int:
    from firstmate.continuity import session_lock

    home = _existing_home()
    if home is None:
        sys.stdout.write(session_lock.ReleaseResult(None).line + "\n")
        return ExitCode.OK
    result = session_lock.release(home, os.environ)
    sys.stdout.write(result.line + "\n")
    return ExitCode.OK


def _status(rest: list[str]) -> int:
    from firstmate.continuity import session_lock

    as_json = rest == ["--json"]
    if rest and not as_json:
        raise UsageError("usage: fm lock status [--json]")
    try:
        home = _existing_home()
    except StateError as exc:
        # status always answers: an unusable home means an unusable lock record.
        ins = session_lock.LockInspection("unreadable", detail=exc.message)
    else:
        ins = session_lock.inspect(home) if home is not None else session_lock.LockInspection("free")
    if as_json:
        payload = ins.to_dict()
        if ins.record is not None:
            payload["owned_by_self"] = session_lock.owned_by_self(ins.record, env=os.environ)
        sys.stdout.write(json.dumps(payload, sort_keys=True) + "\n")
    else:
        sys.stdout.write(ins.line + "\n")
    return ExitCode.OK
