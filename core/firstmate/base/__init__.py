"""The standard-library-only layer: everything a hot command path (a hook's first decision, ``fm
wake append``) may import. Nothing here imports a third-party package or any module outside this
package; ``tests/core/test_layers.py`` enforces it.
"""
