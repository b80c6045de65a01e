"""Whether this fm's environment has the MCP SDK ``fm mcp`` needs (the ``firstmate[mcp]``
extra), and the command that adds it: what ``fm mcp`` refuses without, and what ``fm install``
checks before it registers the server with a harness. Imports nothing of the SDK but to look."""

from __future__ import annotations

#: How to add the SDK: the extra, and the requirement it stands for (pyproject.toml).
EXTRA = "pip install 'firstmate[mcp]'"
SDK_SPEC = "mcp>=2.3,<3"
#: The MCP SDK's major version whose server API this speaks.
SDK_MAJOR = 2


def sdk_missing() -> str | None:
    """Why the MCP SDK this server needs cannot be used here (one line naming the command that
    adds it to this fm's own environment), or None when it can."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        found = version("mcp")
    except PackageNotFoundError:
        found = None
    try:
        import mcp.server.lowlevel  # noqa: F401
    except ImportError:
        return ("mcp: the MCP SDK (the firstmate[mcp] extra) is not installed in this fm's "
                f"environment; add it with: {how_to_add()}")
    major = (found or "").split(".")[0]
    if not major.isdigit() or int(major) != SDK_MAJOR:
        return (f"mcp: this fm's environment has the MCP SDK {found or '(unknown version)'} and "
                f"fm mcp speaks version {SDK_MAJOR}; install that one with: {how_to_add()}")
    return None


def how_to_add() -> str:
    """The command that installs the SDK into this fm's environment, as ``fm plugin add``
    would install a plugin there (pipx inject, uv tool install --with, or pip)."""
    try:
        from firstmate.plugin.installroute import detect

        return detect().add(SDK_SPEC, "mcp").shown()
    except Exception:  # an installer's records it cannot read: the extra still says it
        return EXTRA


__all__ = ["EXTRA", "SDK_MAJOR", "SDK_SPEC", "how_to_add", "sdk_missing"]
