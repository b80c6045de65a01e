"""Watcher event sources. Each source is registered through ``firstmate_watch_sources``."""
