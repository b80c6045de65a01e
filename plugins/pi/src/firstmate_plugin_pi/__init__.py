"""Firstmate plugin for Pi."""

from __future__ import annotations

from firstmate_plugin_pi.plugin import PiPlugin

#: The object registered under the ``firstmate.plugins`` entry point ``pi``.
plugin = PiPlugin()

__all__ = ["PiPlugin", "plugin"]
