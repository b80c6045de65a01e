"""Firstmate plugin for Pi.

Importing this package stays cheap (``fm hook`` and ``fm bridge`` import it on hot paths);
the plugin object and its class load on first access.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate_plugin_pi.hooks import PiPlugin

    #: The object registered under the ``firstmate.plugins`` entry point ``pi``.
    plugin: PiPlugin


def __getattr__(name: str) -> object:
    if name in ("plugin", "PiPlugin"):
        from firstmate_plugin_pi import hooks

        globals().update(plugin=hooks.plugin, PiPlugin=hooks.PiPlugin)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PiPlugin", "plugin"]
