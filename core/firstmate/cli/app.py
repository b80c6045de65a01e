"""``firstmate-<harness>``: the console script each harness plugin installs under its own name.

It is the whole ``fm`` command: pipx exposes the apps of the package it installs, so a plugin
installed with ``pipx install firstmate-plugin-<harness>`` needs one, and a harness launcher that
finds no ``fm`` on PATH runs it instead. With arguments it is ``fm`` exactly (hooks and launchers
call it so); bare, or with nothing but ``-h``/``--help``, it says what it is and points at ``fm``.
"""

from __future__ import annotations

import os
import sys

APP_PREFIX = "firstmate-"


def describe(app: str) -> str:
    """The paragraph ``firstmate-<harness> --help`` prints."""
    import textwrap

    from firstmate.base.names import PLUGIN_MODULE_PREFIX
    from firstmate.base.pluginindex import find

    harness = app[len(APP_PREFIX):] if app.startswith(APP_PREFIX) else ""
    entry = find(harness) if harness else None
    # The installed plugin's own distribution (its entry point says which), else the name the
    # shipped plugins' distributions follow.
    dist = entry.dist if entry and entry.dist else PLUGIN_MODULE_PREFIX.replace("_", "-") + harness
    display = _display(harness) if harness else "its harness"
    what = f"{dist}, the Firstmate plugin for {display}" if harness else "a Firstmate plugin"
    if entry is not None and entry.version:
        what = f"{dist} {entry.version}, the Firstmate plugin for {display}"
    install = f"fm install {harness}" if harness else "fm install HARNESS"
    text = (f"{app} is the command of {what}. It is the whole fm command under the plugin's own "
            "name: pipx exposes it when it installs the plugin, and a launcher that finds no fm "
            f"on PATH runs it instead. Use fm itself: {install} wires {display} into a "
            "project, fm plugin list shows the installed plugins and fm help lists every "
            f"command (where fm is not on PATH, {app} COMMAND runs the same commands).")
    return textwrap.fill(text, width=100)


def _display(harness: str) -> str:
    try:
        from firstmate.plugin.manager import load_harness

        info = load_harness(harness).harness(harness)
    except Exception:  # the harness's own name will do
        return harness
    return info.display_name if info is not None else harness


def main() -> int:
    args = sys.argv[1:]
    if args and args not in (["-h"], ["--help"]):
        from firstmate.cli.main import main as fm

        return fm()
    from firstmate.base.exitcodes import ExitCode

    sys.stdout.write(describe(os.path.basename(sys.argv[0])) + "\n")
    # Bare, like a bare fm: the description, with the usage error's exit status.
    return ExitCode.OK if args else ExitCode.USAGE


__all__ = ["APP_PREFIX", "describe", "main"]
