"""Whole-program features composed from every layer: the core plugin (the built-in sources, backend
and continuity answers, registered like any plugin), ``fm doctor``, ``fm demo`` and the crew
context a drain presents.
"""
