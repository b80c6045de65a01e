"""Firstmate plugin for Cursor."""

from __future__ import annotations

from firstmate_plugin_cursor.plugin import CursorPlugin

#: The object registered under the ``firstmate.plugins`` entry point ``cursor``.
plugin = CursorPlugin()

__all__ = ["CursorPlugin", "plugin"]
