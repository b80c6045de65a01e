"""``fm mcp``: the primary's actions as MCP tools, served over stdio (docs/mcp.md).

Optional: the MCP SDK comes with ``pip install 'firstmate[mcp]'`` and only
:mod:`firstmate.mcp.server` imports it. :mod:`~firstmate.mcp.command` is the command line,
:mod:`~firstmate.mcp.params` reads a tool's arguments as the command line reads its own,
:mod:`~firstmate.mcp.tools` is the tool list (each tool a thin call into the code the ``fm``
command behind it runs, with the same rules), and :mod:`~firstmate.mcp.results` words what a
call gives back, a failure as the command's one line with its exit status.
"""
