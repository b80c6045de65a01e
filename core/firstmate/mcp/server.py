"""The MCP server over stdio: the only module that uses the MCP SDK (``firstmate[mcp]``;
:mod:`firstmate.mcp.command` only checks that it is there).

It lists :data:`firstmate.mcp.tools.TOOLS` and answers each call with the tool's result, or
with an error result (``isError``) carrying the command's one error line and exit status
(:mod:`firstmate.mcp.results`): a bad argument, a refusal, even an internal error is a result,
never a crash of the server. Calls run one at a time, each in a worker thread (the store's
locks and tmux calls block), so the event loop keeps answering the protocol meanwhile. While
it serves, stdout carries only protocol frames: the SDK points file descriptor 1 at stderr
(where logs and anything a tool might print go) and the protocol at a private copy of it.
A stop (HUP, INT, TERM) ends it with 128 + the signal's number, after the call under way.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Mapping
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from firstmate import __version__
from firstmate.base.errors import UsageError
from firstmate.mcp import results
from firstmate.mcp.params import shown
from firstmate.mcp.tools import BY_NAME, TOOLS, Tool

NAME = "firstmate"
INSTRUCTIONS = (
    "Firstmate's tools for the primary agent that supervises a fleet of crews. When Firstmate "
    "wakes you, call wake_drain, handle every row, decision and status line it presents "
    "(crew_peek, crew_steer, crew_answer, crew_spawn, crew_stop), then call wake_ack with the "
    "`ack` arguments the drain returned. fleet_status and crew_list look without consuming "
    "anything. A failed call returns fm's one-line error with its exit status.")


def _tool(tool: Tool) -> types.Tool:
    return types.Tool(
        name=tool.name, description=tool.description, input_schema=tool.schema(),
        annotations=types.ToolAnnotations(read_only_hint=tool.read_only,
                                          destructive_hint=tool.destructive,
                                          idempotent_hint=tool.idempotent,
                                          open_world_hint=False))


def _unknown(name: str) -> UsageError:
    from firstmate.base.suggest import did_you_mean

    hint = did_you_mean(name, list(BY_NAME))
    return UsageError(f"unknown tool '{shown(name)}'; {hint}tools/list names the "
                      f"{len(TOOLS)} tools")


def run_call(env: Mapping[str, str], name: str, given: object) -> types.CallToolResult:
    """One call of tool *name* with *given* as its arguments: its result, or the error result."""
    try:
        tool = BY_NAME.get(name)
        if tool is None:
            raise _unknown(name)
        text, structured = results.success(tool.call(env, given))
        return types.CallToolResult(content=[types.TextContent(text=text)],
                                    structured_content=structured)
    except Exception as exc:
        text, structured, ours = results.failure(exc)
        if not ours:
            sys.stderr.write(f"fm mcp: {name[:80]!r} failed:\n")
            traceback.print_exception(exc, file=sys.stderr)
            sys.stderr.flush()
        return types.CallToolResult(content=[types.TextContent(text=text)],
                                    structured_content=structured, is_error=True)


def build(env: Mapping[str, str], one_at_a_time: anyio.Lock | None = None) -> Server[Any]:
    """The server for the environment *env* (the home it finds, the actor it names); its calls
    run one at a time under *one_at_a_time*."""
    listed = types.ListToolsResult(tools=[_tool(tool) for tool in TOOLS])
    running = one_at_a_time or anyio.Lock()

    async def list_tools(ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return listed

    async def call_tool(ctx: ServerRequestContext[Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        async with running:
            return await anyio.to_thread.run_sync(
                partial(run_call, env, params.name, params.arguments))

    return Server(NAME, version=__version__, title="Firstmate",
                  description="the primary's actions on its fleet", instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


#: Seconds a stop waits for a call under way to finish (its own cleanup: a spawn that fails
#: ends the window it opened) before the server leaves anyway.
STOP_GRACE = 10.0


async def _leave_on_stop(running: anyio.Lock) -> None:
    """A stop (HUP, INT, TERM) ends the server with 128 + its number, once a call under way
    has finished (at most :data:`STOP_GRACE` seconds). It leaves at once (``os._exit``): the
    thread reading stdin cannot be woken, and there is nothing else to clean up."""
    from firstmate.base.stopsignals import NAMES, STOP_SIGNALS

    with anyio.open_signal_receiver(*STOP_SIGNALS) as stops:
        async for signum in stops:
            with anyio.move_on_after(STOP_GRACE):
                async with running:
                    pass
            name = NAMES.get(int(signum), str(int(signum)))
            sys.stderr.write(f"fm mcp: stopped by {name}\n")
            sys.stderr.flush()
            os._exit(128 + int(signum))


def serve(env: Mapping[str, str]) -> int:
    """Serve over this process's stdin and stdout until the client closes stdin; exit 0."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="fm mcp: %(name)s: %(levelname)s: %(message)s")

    async def main() -> None:
        running = anyio.Lock()
        server = build(env, running)
        async with anyio.create_task_group() as group:
            group.start_soon(_leave_on_stop, running)
            async with stdio_server() as (read_stream, write_stream):
                await server.run(read_stream, write_stream,
                                 server.create_initialization_options())
            group.cancel_scope.cancel()

    anyio.run(main)
    return 0


__all__ = ["INSTRUCTIONS", "NAME", "STOP_GRACE", "build", "run_call", "serve"]
