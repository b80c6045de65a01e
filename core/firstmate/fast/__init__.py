"""The hot paths' own logic, in the standard library only: the wake queue's rows (append, actors,
episode, the status view), the crews' reports, the drain and ``fm status``. Each concept lives
here once; the layers above wrap it with what only they have (attrs values, psutil where
``/proc`` cannot tell, portalocker off POSIX, the plugins). It imports nothing but the standard
library, :mod:`firstmate.base` and itself; ``tests/core/test_layers.py`` enforces it.
"""
