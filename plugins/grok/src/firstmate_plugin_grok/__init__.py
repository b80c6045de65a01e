"""Firstmate plugin for Grok: the plugin is ``hooks.plugin``, its quick gate ``gate.quick_gate``."""
