"""Firstmate plugin for Cursor.

Importing this package stays cheap because ``fm hook cursor …`` imports it on every turn for
:func:`quick_gate`; the plugin object and its class load on first access.
"""

from __future__ import annotations

from firstmate_plugin_cursor.gate import quick_gate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate_plugin_cursor.hooks import CursorPlugin

    #: The object registered under the ``firstmate.plugins`` entry point ``cursor``.
    plugin: CursorPlugin


def __getattr__(name: str) -> object:
    if name in ("plugin", "CursorPlugin"):
        from firstmate_plugin_cursor import hooks

        globals().update(plugin=hooks.plugin, CursorPlugin=hooks.CursorPlugin)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CursorPlugin", "plugin", "quick_gate"]
