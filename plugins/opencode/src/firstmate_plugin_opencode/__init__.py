"""Firstmate plugin for OpenCode."""

from __future__ import annotations

from firstmate_plugin_opencode.plugin import OpencodePlugin

#: The object registered under the ``firstmate.plugins`` entry point ``opencode``.
plugin = OpencodePlugin()

__all__ = ["OpencodePlugin", "plugin"]
