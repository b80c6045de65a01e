"""``fm arm``'s command line: the mode it asks for, or a usage error (exit 2, one line)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from firstmate.base.envnum import PID_MAX, decimal
from firstmate.base.errors import UsageError

USAGE = ("usage: fm arm [--restart | --stop | --take-over [ARM_PID] | "
         "--handling-delivered GEN --watcher-pid PID]")


@attrs.frozen
class Mode:
    name: str
    arm_pid: int | None = None
    generation: str | None = None
    watcher_pid: int | None = None


def _pid(text: str, what: str) -> int:
    pid = decimal(text, minimum=1, maximum=PID_MAX)
    if pid is None:
        raise UsageError(f"watcher: invalid {what} {text[:40]!r} (expected a pid from 1 to "
                         f"{PID_MAX}); run 'fm arm --help'")
    return pid


def parse_args(argv: Sequence[str]) -> Mode:
    """The mode *argv* asks for; :class:`UsageError` (exit 2, one line) for anything else."""
    args = list(argv)
    if not args or args == ["--arm"]:
        return Mode("arm")
    head = args[0]
    if head in ("--restart", "--stop") and len(args) == 1:
        return Mode(head[2:])
    if head == "--take-over" and len(args) <= 2:
        return Mode("take-over", arm_pid=_pid(args[1], "arm pid") if len(args) == 2 else None)
    if head == "--handling-delivered":
        if len(args) != 4 or args[2] != "--watcher-pid":
            raise UsageError("watcher: invalid handling delivery confirmation; " + USAGE[7:])
        from firstmate.store.episodes import valid_generation

        if not valid_generation(args[1]):
            raise UsageError("watcher: invalid recovery generation (expected [A-Za-z0-9._-]+); "
                             "run 'fm arm --help'")
        return Mode("handling-delivered", generation=args[1],
                    watcher_pid=_pid(args[3], "successor watcher pid"))
    raise UsageError(USAGE)


__all__ = ["USAGE", "Mode", "parse_args"]
