"""Firstmate plugin for Pi: the plugin is ``hooks.plugin``."""
