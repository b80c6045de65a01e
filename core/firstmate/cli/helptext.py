"""What ``fm help`` (``fm --help``, bare ``fm``) prints: the commands in groups, by who runs them.

Kept out of :mod:`firstmate.cli.main`, which every command and hook imports: only a request for
the list pays for these tables.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

USAGE = "usage: fm [-h] [-V] COMMAND [ARGS...]"
FOOTER = ("fm help COMMAND [SUBCOMMAND] (or fm COMMAND --help) describes a command and its "
          "options;\ndocs/cli.md has them all.")

#: (heading, commands in the order a newcomer meets them). Every core command
#: (firstmate.cli.main.COMMANDS) is in exactly one group (tests/core/test_cli_help.py).
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("everyday commands", ("install", "uninstall", "plugin", "crew", "status", "top", "doctor",
                           "demo")),
    ("now and then", ("check", "away", "host", "fleet")),
    ("the model's commands (the wake it drains and acknowledges)", ("wake",)),
    ("plumbing (harness hooks, shims, the watcher and scripts run these)",
     ("hook", "bridge", "mcp", "arm", "watch", "checkpoint", "turnend-guard", "guard", "lock",
      "migrate", "plugins")),
)


def plugin_commands(commands: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """Plugin command name → its one-line help (the first line of the callable's docstring),
    for the names *commands* (the core's) does not hold. Loading every plugin is fine here: only
    ``fm help`` and a mistyped command ask."""
    try:
        from firstmate.plugin.manager import load

        registry = load().cli_commands()
    except Exception:  # a broken plugin must not break the help; fm plugin list reports it
        return {}
    found: dict[str, str] = {}
    for name, command in registry.items():
        if name in commands or not callable(command):
            continue
        doc = (getattr(command, "__doc__", None) or "").strip().splitlines()
        found[name] = doc[0].strip() if doc else "(a plugin command)"
    return found


def render(commands: Mapping[str, tuple[str, str]]) -> str:
    """The list, from *commands* (name → (module, one-line help)) and the plugins' commands."""
    plugin = plugin_commands(commands)
    width = max(len(name) for name in [*commands, *plugin, "-V, --version"])
    lines = [USAGE, "", "Keeps a primary coding agent awake to its fleet of crew agents.", "",
             "options:", f"  {'-h, --help'.ljust(width)}  show this help and exit",
             f"  {'-V, --version'.ljust(width)}  print the version and exit"]
    for heading, names in GROUPS:
        lines += ["", f"{heading}:"]
        lines += [f"  {name.ljust(width)}  {commands[name][1]}" for name in names]
    if plugin:
        lines += ["", "plugin commands:"]
        lines += [f"  {name.ljust(width)}  {text}" for name, text in sorted(plugin.items())]
    lines += ["", FOOTER]
    return "\n".join(lines)


__all__ = ["FOOTER", "GROUPS", "USAGE", "plugin_commands", "render"]
