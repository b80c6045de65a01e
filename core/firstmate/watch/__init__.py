"""The watcher: one cycle that polls its event sources until one is actionable, the sources, and
the crew backends they read panes through.
"""
