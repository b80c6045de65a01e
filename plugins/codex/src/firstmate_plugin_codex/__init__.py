"""Firstmate plugin for Codex."""

from __future__ import annotations

from firstmate_plugin_codex.plugin import CodexPlugin

#: The object registered under the ``firstmate.plugins`` entry point ``codex``.
plugin = CodexPlugin()

__all__ = ["CodexPlugin", "plugin"]
