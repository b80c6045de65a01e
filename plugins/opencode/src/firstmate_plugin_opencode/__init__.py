"""Firstmate plugin for OpenCode: the plugin is ``hooks.plugin``."""
