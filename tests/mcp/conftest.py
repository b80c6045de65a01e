"""The MCP server's tests: the real ``fm mcp`` spawned by the SDK's own stdio client
(``mcp.client.stdio``), driven from plain test functions through a blocking portal. They need
the ``mcp`` extra (tox -e mcp); without it they are skipped. The core tests' rigs (a home, the
wake queue helpers, the crew fleet on a private tmux server) are shared from tests/core."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client.stdio", reason="the MCP SDK is not installed (tox -e mcp)")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "core"))

from fleet_support import Fleet, make_fleet  # noqa: E402
from mcp_support import McpClient  # noqa: E402


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """A home and a private tmux server with the stand-in crew harness (tests/core)."""
    yield from make_fleet(tmp_path)


@pytest.fixture
def connect(tmp_path: Path) -> Iterator[Callable[..., McpClient]]:
    """Start ``fm mcp`` (with these environment and arguments) and connect the SDK's client;
    every server started is closed at the end, and none may have printed a traceback."""
    started: list[McpClient] = []

    def start(env: dict[str, str], *args: str, cwd: Path | None = None,
              **kwargs: Any) -> McpClient:
        client = McpClient(env, args, cwd=cwd or tmp_path,
                           errlog=tmp_path / f"server-{len(started)}.stderr", **kwargs)
        started.append(client)
        return client

    yield start
    for client in started:
        client.close()
    for client in started:
        assert "Traceback" not in client.stderr(), client.stderr()
