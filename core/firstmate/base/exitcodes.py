"""Every exit status the `fm` command can return, in one place (documented in docs/cli.md)."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    #: The operation ran and failed (a `watcher: FAILED - …` line, a lock held by another live
    #: session, an episode that could not be retired safely).
    FAILED = 1
    #: Bad arguments or bad input (unknown wake kind, empty key, malformed payload). Nothing written.
    USAGE = 2
    #: Refused because of a conflicting claim (a branch grant asked for a row main already claimed).
    CONFLICT = 3
    #: The state home is unsafe or unusable (a symlinked state path, wrong owner, unwritable,
    #: missing, corrupt database). Nothing was written; the message names the fix.
    STATE = 4
    #: The tool could not run its own code (a plugin failed to load where one was required).
    PLUGIN = 5
    #: A bounded wait ended with no actionable event (a quiet `fm checkpoint`).
    QUIET = 124
    #: Stopped by a signal after cleanup: 128 + signal number.
    SIGHUP = 129
    SIGINT = 130
    SIGTERM = 143


def for_signal(signum: int) -> int:
    """The conventional exit status for a process stopped by *signum*."""
    return 128 + int(signum)
