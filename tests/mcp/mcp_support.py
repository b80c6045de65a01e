"""A synchronous handle on the real ``fm mcp``, spawned and spoken to by the MCP SDK's own
stdio client (``mcp.client.stdio.stdio_client`` and ``mcp.ClientSession``), for plain pytest
and hypothesis tests: the client runs in an anyio blocking portal's event loop."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import threading
import time
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


def frame(**message: Any) -> bytes:
    return (json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode()


class Raw:
    """``fm mcp`` spoken to byte by byte; every line it writes to stdout is kept."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "firstmate", "mcp"], env=env,
                                     cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def answer(self, request: int, deadline: float = 60.0) -> dict[str, Any]:
        """The frame answering *request*; every line read meanwhile must be a JSON-RPC frame."""
        end = time.monotonic() + deadline
        while True:
            for got in self.seen:
                if got.get("id") == request:
                    return got
            line = self.lines.get(timeout=max(0.1, end - time.monotonic()))
            got = json.loads(line)
            assert isinstance(got, dict) and got.get("jsonrpc") == "2.0", line[:200]
            self.seen.append(got)

    def initialize(self) -> dict[str, Any]:
        """The handshake as a harness makes it (the 2025-06-18 protocol); the server's answer."""
        self.send(frame(id=1, method="initialize", params={
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}))
        answer = self.answer(1)
        self.send(frame(method="notifications/initialized"))
        return answer

    def rest(self) -> list[dict[str, Any]]:
        """Every frame written after those read so far, once stdout is closed."""
        assert self.proc.stdout is not None
        while True:
            try:
                line = self.lines.get(timeout=30)
            except queue.Empty:
                break
            got = json.loads(line)
            assert isinstance(got, dict) and got.get("jsonrpc") == "2.0", line[:200]
            self.seen.append(got)
            if self.proc.poll() is not None and self.lines.empty():
                break
        return self.seen

    def close(self) -> tuple[int, bytes]:
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=60)
        return code, self.proc.stderr.read()
