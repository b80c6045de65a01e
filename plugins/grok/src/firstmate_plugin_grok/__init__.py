"""Firstmate plugin for Grok."""

from __future__ import annotations

from firstmate_plugin_grok.plugin import GrokPlugin

#: The object registered under the ``firstmate.plugins`` entry point ``grok``.
plugin = GrokPlugin()

__all__ = ["GrokPlugin", "plugin"]
