"""The foundations, in the standard library only: what any command needs before it knows what it
is doing (the project's names, errors and exit codes, numbers from the environment, paths and
whose they are, which home, this and other processes' identities, kernel locks and their owner
records, the database connection and what its failures mean, signals, text hygiene) and the two
modules a harness plugin's hook calls first (its quick gate, a delivered wake's text). Nothing
here imports a third-party package or any module outside this package;
``tests/core/test_layers.py`` enforces it.
"""
