"""Firstmate plugin for Cursor: the plugin is ``hooks.plugin``, its quick gate ``gate.quick_gate``."""
