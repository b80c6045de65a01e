"""Firstmate plugin for omp.

Importing this package stays cheap (``fm hook`` and ``fm bridge`` import it on hot paths);
the plugin object and its class load on first access.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from firstmate_plugin_omp.hooks import OmpPlugin

    #: The object registered under the ``firstmate.plugins`` entry point ``omp``.
    plugin: OmpPlugin


def __getattr__(name: str) -> object:
    if name in ("plugin", "OmpPlugin"):
        from firstmate_plugin_omp import hooks

        globals().update(plugin=hooks.plugin, OmpPlugin=hooks.OmpPlugin)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["OmpPlugin", "plugin"]
