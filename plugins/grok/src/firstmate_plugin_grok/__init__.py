"""Firstmate plugin for Grok.

Importing this package stays cheap because ``fm hook grok …`` imports it on every turn for
:func:`quick_gate`; the plugin object and its class load on first access.
"""

from __future__ import annotations

from firstmate_plugin_grok.gate import quick_gate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate_plugin_grok.hooks import GrokPlugin

    #: The object registered under the ``firstmate.plugins`` entry point ``grok``.
    plugin: GrokPlugin


def __getattr__(name: str) -> object:
    if name in ("plugin", "GrokPlugin"):
        from firstmate_plugin_grok import hooks

        globals().update(plugin=hooks.plugin, GrokPlugin=hooks.GrokPlugin)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GrokPlugin", "plugin", "quick_gate"]
