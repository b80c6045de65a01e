"""``fm lock acquire|status|release``: the primary session lock (see firstmate.continuity.session_lock).

Refusals are one ``fm: <what>; <what to do>`` line on stderr, like every other fm error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from firstmate.base.errors import StateError
from firstmate.base.exitcodes import ExitCode
from firstmate.cli.args import Parser
from firstmate.store.home import Home, open_home, resolve_root


def parser() -> Parser:
    parser = Parser("fm lock", "Acquire, inspect or release the primary session lock: the one "
                    "harness session per home that drains and acknowledges wakes.")
    parser.add_command("acquire", "take the lock for the harness session above this fm (prints "
                       "lock acquired: harness pid <P>); exit 1 when another live session holds it")
    status = parser.add_command("status", "one line saying who holds the lock; always exit 0")
    status.add_argument("--json", action="store_true",
                        help="print one JSON object: state, line, pid, owner, recoverable, "
                             "detail, record and, with a record, owned_by_self")
    parser.add_command("release", "remove the lock, only when it belongs to this session")
    return parser


def main(argv: Sequence[str]) -> int:
    args = parser().parse(argv)
    if args.command == "status":
        return _status(args.json)
    if args.command == "acquire":
        return _acquire()
    return _release()


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


def _status(as_json: bool) -> int:
    from firstmate.continuity import session_lock

    try:
        home = _existing_home()
    except StateError as exc:
        # status always answers: an unusable home means an unusable lock record.
        ins = session_lock.LockInspection("unreadable", detail=exc.message)
    else:
        ins = session_lock.inspect(home) if home is not None else session_lock.LockInspection("free")
    if as_json:
        from firstmate.cli import jsonout

        payload = ins.to_dict()
        if ins.record is not None:
            payload["owned_by_self"] = session_lock.owned_by_self(ins.record, env=os.environ)
        jsonout.write(payload)
    else:
        sys.stdout.write(ins.line + "\n")
    return ExitCode.OK
