"""Keeping a watcher armed: the arm (start, attach, take over a cycle; its watcher child, wedge
recovery and control modes), the continuity engine that re-arms after every close and confirms
the handoff, parked stop hooks and their follow-up chains, the session lock.
"""
