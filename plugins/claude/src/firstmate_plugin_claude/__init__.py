"""Firstmate plugin for Claude Code.

Importing this package stays cheap because ``fm hook claude …`` imports it on every turn for
:func:`quick_gate`; the plugin object and its class load on first access.
"""

from __future__ import annotations

from firstmate_plugin_claude.gate import quick_gate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate_plugin_claude.hooks import ClaudePlugin

    #: The object registered under the ``firstmate.plugins`` entry point ``claude``.
    plugin: ClaudePlugin


def __getattr__(name: str) -> object:
    if name in ("plugin", "ClaudePlugin"):
        from firstmate_plugin_claude import hooks

        globals().update(plugin=hooks.plugin, ClaudePlugin=hooks.ClaudePlugin)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ClaudePlugin", "plugin", "quick_gate"]
