"""Crew backends: how the watcher reads crew panes (tmux by default, ``firstmate_crew_backend``)."""
