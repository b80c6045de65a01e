"""Firstmate plugin for Codex: the plugin is ``hooks.plugin``, its quick gate ``gate.quick_gate``."""
