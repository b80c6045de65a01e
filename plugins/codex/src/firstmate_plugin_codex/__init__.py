"""Firstmate plugin for Codex.

Importing this package stays cheap because ``fm hook codex …`` imports it on every turn for
:func:`quick_gate`; the plugin object and its class load on first access.
"""

from __future__ import annotations

from firstmate_plugin_codex.gate import quick_gate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate_plugin_codex.hooks import CodexPlugin

    #: The object registered under the ``firstmate.plugins`` entry point ``codex``.
    plugin: CodexPlugin


def __getattr__(name: str) -> object:
    if name in ("plugin", "CodexPlugin"):
        from firstmate_plugin_codex import hooks

        globals().update(plugin=hooks.plugin, CodexPlugin=hooks.CodexPlugin)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CodexPlugin", "plugin", "quick_gate"]
