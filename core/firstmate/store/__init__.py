"""Durable state of a home: the directory, the SQLite store and its tables (wake queue, drain and
acknowledgement, grants, deliveries, recovery episodes), locks and process identity, the crew
and check registries, what needs supervision, whether a session is a primary, the bounded logs
and the watcher's health.
"""
