"""Firstmate plugin for Claude Code: the plugin is ``hooks.plugin``, its quick gate ``gate.quick_gate``."""
