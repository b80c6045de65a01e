"""Long-lived owners of supervision: the supervision host and away mode, and the bridge that runs
the continuity engine for in-process harnesses.
"""
