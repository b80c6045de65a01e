"""Firstmate plugin for OpenCode.

Importing this package stays cheap (``fm hook`` and ``fm bridge`` import it on hot paths);
the plugin object and its class load on first access.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate_plugin_opencode.hooks import OpencodePlugin

    #: The object registered under the ``firstmate.plugins`` entry point ``opencode``.
    plugin: OpencodePlugin


def __getattr__(name: str) -> object:
    if name in ("plugin", "OpencodePlugin"):
        from firstmate_plugin_opencode import hooks

        globals().update(plugin=hooks.plugin, OpencodePlugin=hooks.OpencodePlugin)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["OpencodePlugin", "plugin"]
