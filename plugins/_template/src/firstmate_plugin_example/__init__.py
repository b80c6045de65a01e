"""Firstmate plugin for Example: the plugin is ``hooks.plugin``, its quick gate ``gate.quick_gate``."""
