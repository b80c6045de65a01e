"""Every exit status the `fm` command can return, in one place (documented in docs/cli.md)."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final


class ExitCode:
    """Plain ints, not an enum: importing :mod:`enum` costs a reporting crew or a hook a
    quarter of an interpreter's start, and every command imports this module."""

    OK: Final = 0
    #: The operation ran and failed (a `watcher: FAILED - …` line, a lock held by another live
    #: session, an episode that could not be retired safely).
    FAILED: Final = 1
    #: Bad arguments or bad input (unknown wake kind, empty key, malformed payload). Nothing written.
    USAGE: Final = 2
    #: Refused because of a conflicting claim (a branch grant asked for a row main already claimed).
    CONFLICT: Final = 3
    #: The state home is unsafe or unusable (a symlinked state path, wrong owner, unwritable,
    #: missing, corrupt database). Nothing was written; the message names the fix.
    STATE: Final = 4
    #: The tool could not run its own code (a plugin failed to load where one was required).
    PLUGIN: Final = 5
    #: A bounded wait ended with no actionable event (a quiet `fm checkpoint`).
    QUIET: Final = 124
    #: Stopped by a signal after cleanup: 128 + signal number.
    SIGHUP: Final = 129
    SIGINT: Final = 130
    SIGTERM: Final = 143


def names() -> dict[str, int]:
    """Every exit status by name (for the docs' check)."""
    return {name: value for name, value in vars(ExitCode).items()
            if name.isupper() and isinstance(value, int)}


def for_signal(signum: int) -> int:
    """The conventional exit status for a process stopped by *signum*."""
    return 128 + int(signum)
