"""Errors that carry their own exit code and a one-line message naming the fix."""

from __future__ import annotations

from firstmate.base.exitcodes import ExitCode


class FirstmateError(Exception):
    """A failure the command line reports as one line on stderr with :attr:`exit_code`."""

    exit_code: int = ExitCode.FAILED

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else type(self).__name__


class HelpShown(Exception):
    """A command printed its help (``-h/--help``) on stdout: it ends there with exit 0.

    Not a :class:`FirstmateError`: nothing went wrong, and a handler of those must not catch it.
    """


class UsageError(FirstmateError):
    exit_code = ExitCode.USAGE


class StateError(FirstmateError):
    """The state home is unsafe, missing, or corrupt."""

    exit_code = ExitCode.STATE


class ConflictError(FirstmateError):
    exit_code = ExitCode.CONFLICT


class LockTimeout(FirstmateError):
    """A bounded lock wait ran out; :attr:`holder_pid` names the live holder when known."""

    def __init__(self, message: str, *, holder_pid: int | None = None, waited: float = 0.0) -> None:
        super().__init__(message)
        self.holder_pid = holder_pid
        self.waited = waited
