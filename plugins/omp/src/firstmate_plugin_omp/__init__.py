"""Firstmate plugin for omp."""

from __future__ import annotations

from firstmate_plugin_omp.plugin import OmpPlugin

#: The object registered under the ``firstmate.plugins`` entry point ``omp``.
plugin = OmpPlugin()

__all__ = ["OmpPlugin", "plugin"]
