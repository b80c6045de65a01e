"""What a tool call gives back: a result as the ``--json`` object of its command (also as that
object's one JSON line of text, for a harness that reads only text), and a failure as the
command's one error line with its exit status named.

A failure is worded as ``fm`` words it on stderr (:func:`firstmate.cli.main.main`): a
:class:`~firstmate.base.errors.FirstmateError`'s own message and exit status, a refusal of
the operating system as ``cannot use <file>: …`` (exit 4), and anything else as an internal
error (exit 1; the server writes its traceback to stderr). The line is one line, printable and
bounded, whatever the message held.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from firstmate.base.errors import FirstmateError
from firstmate.base.exitcodes import ExitCode, names
from firstmate.cli import jsonout

#: The longest error line a call returns (characters): a message quoting a huge argument is cut.
MAX_ERROR = 2000


def success(obj: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The text (the command's one ``--json`` line) and the structured content of a result."""
    text = jsonout.dumps(obj)
    structured = json.loads(text)
    assert isinstance(structured, dict)
    return text, structured


def exit_name(code: int) -> str:
    """The exit status's name in docs/cli.md (``USAGE`` for 2)."""
    for name, value in names().items():
        if value == code:
            return name
    return str(code)


def one_line(message: str, limit: int = MAX_ERROR) -> str:
    """*message* as one printable line of at most *limit* characters."""
    line = " ".join(message.split())
    line = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def failure(exc: BaseException) -> tuple[str, dict[str, Any], bool]:
    """The text and structured content of a failed call, and whether the failure is fm's own
    (False: an internal error, whose traceback is worth logging)."""
    ours = True
    if isinstance(exc, FirstmateError):
        message, code = exc.message, int(exc.exit_code)
    elif isinstance(exc, OSError):
        what = f"cannot use {exc.filename}" if exc.filename else "the system refused"
        message = (f"{what}: {exc.strerror or exc}; free space or fix the path and its "
                   "permissions, then retry")
        code = ExitCode.STATE
    else:
        ours = False
        message = (f"internal error: {type(exc).__name__}: {exc}; the server goes on; report "
                   "it with the traceback the server wrote to its stderr")
        code = ExitCode.FAILED
    line = one_line(message)
    name = exit_name(code)
    return (f"fm: {line} (exit {code} {name})",
            {"error": line, "exit_code": code, "exit": name}, ours)


__all__ = ["MAX_ERROR", "exit_name", "failure", "one_line", "success"]
