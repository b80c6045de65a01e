"""Firstmate plugin for Claude Code."""

from __future__ import annotations

from firstmate_plugin_claude.plugin import ClaudePlugin

#: The object registered under the ``firstmate.plugins`` entry point ``claude``.
plugin = ClaudePlugin()

__all__ = ["ClaudePlugin", "plugin"]
