"""Commands contributed by plugins (looked up only for names the core does not know)."""

from __future__ import annotations

from collections.abc import Callable


def plugin_command(name: str) -> Callable[[list[str]], int] | None:
    from firstmate.plugin.manager import load

    command = load().cli_commands().get(name)
    return command if callable(command) else None
