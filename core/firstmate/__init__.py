"""Firstmate: keeps a primary AI coding agent awake to its fleet.

Plugin authors import :data:`hookimpl` from here. Everything else is imported lazily by the
modules that need it, so that hot command paths stay cheap to start.
"""

from __future__ import annotations

from firstmate.base.names import PROJECT

# Not `from typing import …`: typing (and the re it pulls in) costs more than a hook's whole
# start-up budget. Type checkers treat a module-level TYPE_CHECKING = False as typing's.
TYPE_CHECKING = False

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

    import pluggy

    hookimpl: pluggy.HookimplMarker
    hookspec: pluggy.HookspecMarker


def __getattr__(name: str) -> Any:
    # pluggy is imported only when a plugin actually asks for a marker.
    if name in ("hookimpl", "hookspec"):
        import pluggy

        marker = pluggy.HookimplMarker(PROJECT) if name == "hookimpl" else pluggy.HookspecMarker(PROJECT)
        globals()[name] = marker
        return marker
    raise AttributeError(name)


__all__ = ["PROJECT", "__version__", "hookimpl", "hookspec"]
