"""A synchronous handle on the real ``fm mcp``, spawned and spoken to by the MCP SDK's own
stdio client (``mcp.client.stdio.stdio_client`` and ``mcp.ClientSession``), for plain pytest
and hypothesis tests: the client runs in an anyio blocking portal's event loop."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mcp_types as types
from anyio.from_thread import start_blocking_portal
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

#: Seconds a call may take before the test fails (a spawn waits for its crew to start).
CALL_TIMEOUT = 120.0


class McpClient:
    """``fm mcp`` *args* in *cwd* with environment *env*, initialised and ready for calls."""

    def __init__(self, env: dict[str, str], args: Sequence[str] = (), *, cwd: Path,
                 errlog: Path) -> None:
        self.errlog = errlog
        self._stack = contextlib.ExitStack()
        try:
            self.portal = self._stack.enter_context(start_blocking_portal())
            self._err = self._stack.enter_context(open(errlog, "w"))  # noqa: SIM115
            params = StdioServerParameters(command=sys.executable,
                                           args=["-m", "firstmate", "mcp", *args],
                                           env=env, cwd=str(cwd))
            read, write = self._stack.enter_context(
                self.portal.wrap_async_context_manager(stdio_client(params, errlog=self._err)))
            self.session: ClientSession = self._stack.enter_context(
                self.portal.wrap_async_context_manager(
                    ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT)))
            self.init = self.portal.call(self.session.initialize)
        except BaseException:
            self._stack.close()
            raise

    def tools(self) -> list[types.Tool]:
        return list(self.portal.call(self.session.list_tools).tools)

    def call(self, name: str, arguments: Any = None) -> types.CallToolResult:
        result = self.portal.call(self.session.call_tool, name, arguments)
        assert isinstance(result, types.CallToolResult)
        return result

    def ok(self, name: str, arguments: Any = None) -> dict[str, Any]:
        """The structured result of a call that must succeed (its text is the same object)."""
        result = self.call(name, arguments)
        text = result.content[0].text if result.content else ""
        assert not result.is_error, text
        assert isinstance(result.structured_content, dict)
        assert json.loads(text) == result.structured_content
        return result.structured_content

    def error(self, name: str, arguments: Any = None) -> str:
        """The one error line of a call that must fail."""
        result = self.call(name, arguments)
        assert result.is_error, result
        assert len(result.content) == 1
        text = result.content[0].text
        assert isinstance(text, str) and "\n" not in text and text.startswith("fm: "), text
        assert isinstance(result.structured_content, dict)
        assert text.endswith(f"(exit {result.structured_content['exit_code']} "
                             f"{result.structured_content['exit']})")
        return text

    def ping(self) -> None:
        self.portal.call(self.session.send_ping)

    def stderr(self) -> str:
        if not self._err.closed:
            self._err.flush()
        return self.errlog.read_text(errors="replace")

    def close(self) -> None:
        self._stack.close()
