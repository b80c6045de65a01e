"""The backstops: the turn-end guard (every harness's stop hook asks it) and the pull guard (``fm
guard``), and what both say about a watcher that is down.
"""
