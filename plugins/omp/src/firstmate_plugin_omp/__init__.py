"""Firstmate plugin for omp: the plugin is ``hooks.plugin``."""
