"""Which command a harness config should run to reach this installation of Firstmate.

A harness started from a desktop launcher, or Firstmate installed into its own environment (as
pipx does), has no ``fm`` on its PATH: a bare ``fm`` in a hook would fail with exit 127 and
supervision would be silently off. So ``fm install`` writes this installation's own entry point by
absolute path: the ``fm`` script installed next to this interpreter when it is ours, else this
interpreter with ``-P -m firstmate`` (``-P``: hooks run in the project directory, and a
``firstmate/`` package there must never be imported in fm's place). The path is the
environment's, never a resolved symlink: a venv's ``bin/python`` is what keeps the venv's
packages.
"""

from __future__ import annotations

import os
import shlex
import sys

from firstmate.base.names import MODULE_ARGS

#: What our ``fm`` script contains (core/scripts/fm): a script of that name from another
#: package next to the interpreter is not ours.
_SCRIPT_MARK = b"firstmate.cli.main"


def own_script(executable: str | None = None) -> str | None:
    """The absolute path of our ``fm`` script beside *executable* (this interpreter), if any."""
    interpreter = executable if executable is not None else sys.executable
    if not interpreter:
        return None
    script = os.path.join(os.path.dirname(os.path.abspath(interpreter)), "fm")
    try:
        with open(script, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    return script if _SCRIPT_MARK in head and os.access(script, os.X_OK) else None


def own_argv(executable: str | None = None) -> list[str]:
    """This installation's ``fm`` as argv words: the script by absolute path, else ``python -P
    -m firstmate``."""
    script = own_script(executable)
    if script is not None:
        return [script]
    return [os.path.abspath(executable if executable is not None else sys.executable),
            *MODULE_ARGS]


def own_command(executable: str | None = None) -> str:
    """:func:`own_argv` as one shell-quoted string (the ``--fm-command`` an install defaults to)."""
    return shlex.join(own_argv(executable))


__all__ = ["own_argv", "own_command", "own_script"]
