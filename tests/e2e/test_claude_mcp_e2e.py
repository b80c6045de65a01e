"""End to end: the real Claude Code acts on a wake through the firstmate MCP server that
``fm install claude`` registered, against a loopback mock model.

``fm install claude`` writes the hooks and the project's ``.mcp.json``, and approves the server
in ``.claude/settings.local.json``, so Claude Code starts it without asking (the SessionStart
hook runs with no question answered); the scratch user has allowed its tools once
(``mcp__firstmate``), as a user does at Claude's first tool call. Claude starts in tmux; its Stop
hook arms the watcher.
A wake is appended; the mock model answers the wake's request as a model does in this Claude
Code, which defers MCP tools: a ``ToolSearch`` that loads the firstmate tools, then a
``tool_use`` of ``mcp__firstmate__wake_drain``, then, given the drain's result, one of
``mcp__firstmate__wake_ack`` with the ``ack`` the drain returned. Claude Code itself starts
``fm mcp`` and makes both calls. The queue ends with the row acknowledged exactly once, and the
turn's end parks the Stop hook on the successor watcher.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crew_rig import _message, serve_messages
from test_claude_e2e import (
    CONTEXT,
    REPO,
    capture,
    claude_bin,
    eventually,
    fm,
    fm_shim,
    healthy_watcher,
    kv,
    parked,
    pytestmark,  # noqa: F401  (node, npm and tmux, and the timeout)
    tmux_session,
)

MARK = "E2E-MCP-WAKE"
DRAIN, ACK = "mcp__firstmate__wake_drain", "mcp__firstmate__wake_ack"
SEARCH = "ToolSearch"


def _turn(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The newest turn: every message after the last assistant one."""
    turn: list[dict[str, Any]] = []
    for message in reversed([m for m in body.get("messages") or [] if isinstance(m, dict)]):
        if message.get("role") == "assistant":
            break
        turn.insert(0, message)
    return turn


def _parts(turn: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for message in turn:
        content = message.get("content")
        if isinstance(content, list):
            yield from (part for part in content if isinstance(part, dict))
        elif isinstance(content, str):
            yield {"type": "text", "text": content}


def _result_text(part: dict[str, Any]) -> str:
    content = part.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class ScriptedModel:
    """Answers the wake with the firstmate tools: wake_drain, then wake_ack with the drain's
    ``ack``; every other request with a short text."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []  # (tool, input) as the model sent
        self.results: dict[str, str] = {}  # tool → the text of its result, as Claude gave it
        self.raw: dict[str, str] = {}  # tool → its whole tool_result block, as JSON
        self.lock = threading.Lock()
        self.ids: dict[str, str] = {}  # tool_use id → tool
        self.server = serve_messages(self.answer, self.bodies, self.lock)
        self.port = self.server.server_address[1]

    def _call(self, model: str, tool: str, given: dict[str, Any]) -> bytes:
        call_id = f"toolu_{uuid.uuid4().hex[:16]}"
        self.ids[call_id] = tool
        self.calls.append((tool, given))
        return _message(model, [({"type": "tool_use", "id": call_id, "name": tool, "input": {}},
                                 {"type": "input_json_delta",
                                  "partial_json": json.dumps(given)})], "tool_use")

    def answer(self, body: dict[str, Any]) -> bytes:
        model = str(body.get("model") or "claude-mock")
        tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        parts = list(_parts(_turn(body)))
        results = [p for p in parts if p.get("type") == "tool_result"
                   and p.get("tool_use_id") in self.ids]
        if results:
            tool = self.ids[results[-1]["tool_use_id"]]
            text = _result_text(results[-1])
            self.results[tool] = text
            self.raw[tool] = json.dumps(results[-1])
            if tool == SEARCH:
                return self._call(model, DRAIN, {})
            if tool == DRAIN:
                ack = json.loads(text)["ack"]
                return self._call(model, ACK, {"through": ack["through"],
                                               "generation": ack["generation"]})
            return _message(model, [({"type": "text", "text": ""},
                                     {"type": "text_delta", "text": "ACKED"})], "end_turn")
        woken = any(MARK in json.dumps(p) for p in parts)
        if woken and SEARCH in tools and SEARCH not in self.results:
            # Claude Code defers MCP tools: a model loads their schemas with ToolSearch first.
            return self._call(model, SEARCH, {"query": f"select:{DRAIN},{ACK}",
                                              "max_results": 5})
        return _message(model, [({"type": "text", "text": ""},
                                 {"type": "text_delta", "text": "OK-DONE"})], "end_turn")

    def seen(self, text: str) -> bool:
        with self.lock:
            return any(text in json.dumps(body) for body in self.bodies)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_real_claude_drains_and_acknowledges_a_wake_through_the_firstmate_mcp_tools(
        tmp_path: Path) -> None:
    from firstmate.plugin.mcpsdk import sdk_missing

    if sdk_missing() is not None:
        pytest.skip("the MCP SDK is not installed: fm install registers no server")
    claude = claude_bin()
    scratch_home, project = tmp_path / "userhome", tmp_path / "project"
    home, bindir = tmp_path / "fmhome", tmp_path / "bin"
    for d in (scratch_home, project, scratch_home / ".claude"):
        d.mkdir()
    fm_shim(bindir)
    pythonpath = os.pathsep.join([str(REPO / "core"), str(REPO / "plugins" / "claude" / "src"),
                                  *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    mock = ScriptedModel()
    # The user's one-time approvals: the project's trust and the server's tools (the server
    # itself fm install approves).
    (scratch_home / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True, "theme": "dark",
        "projects": {str(project): {"hasTrustDialogAccepted": True}},
        "customApiKeyResponses": {"approved": ["sk-dummy"], "rejected": []},
    }))
    (scratch_home / ".claude" / "settings.json").write_text(json.dumps({
        "permissions": {"allow": ["mcp__firstmate"]}}))
    base_env = {
        "HOME": str(scratch_home),
        "PATH": os.pathsep.join([str(bindir), os.environ.get("PATH", "/usr/bin:/bin")]),
        "PYTHONPATH": pythonpath,
        "TERM": "xterm-256color",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    fm_env = {**base_env, "FM_HOME": str(home)}
    claude_env = {**base_env, "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{mock.port}",
                  "ANTHROPIC_API_KEY": "sk-dummy", "DISABLE_AUTOUPDATER": "1",
                  "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    socket_name = f"fm-e2e-mcp-{os.getpid()}"
    try:
        done = fm(fm_env, "install", "claude", "--project", str(project), "--home", str(home),
                  cwd=project)
        assert done.returncode == 0, done.stderr
        server = json.loads((project / ".mcp.json").read_text())["mcpServers"]["firstmate"]
        assert server["args"][-3:] == ["mcp", "--home", str(home)]
        local = json.loads((project / ".claude" / "settings.local.json").read_text())
        assert local["enabledMcpjsonServers"] == ["firstmate"]
        assert fm(fm_env, "crew", "add", "builder", "--pane", "%9999", cwd=project).returncode == 0

        with tmux_session(socket_name, project, claude_env, [str(claude)]) as target:
            CONTEXT[:] = [
                lambda: f"calls: {mock.calls}; results: {mock.results}",
                lambda: f"ledger: {kv(home, 'claude.autoarm')}",
                lambda: "pane: " + capture(socket_name, target)[-1500:],
                lambda: "fm status: " + fm(fm_env, "status").stdout[-1200:],
            ]
            eventually("the Claude prompt", lambda: "❯" in capture(socket_name, target))
            # The session started with no question about the server: its hook took the lock.
            eventually("the SessionStart hook's session lock",
                       lambda: "held by live harness" in fm(fm_env, "lock", "status").stdout)
            assert "MCP server" not in capture(socket_name, target)
            subprocess.run(["tmux", "-L", socket_name, "send-keys", "-t", target,
                            "hello from the e2e test", "Enter"], check=True)
            eventually("the first user turn at the mock", lambda: mock.seen("hello from the e2e"))
            first = eventually("a watcher armed by the Stop hook", lambda: healthy_watcher(fm_env))
            epoch = eventually("a parked Stop hook", lambda: parked(home, 0))

            fm(fm_env, "wake", "append", "signal", "builder", f"signal: builder done: {MARK}")
            eventually("wake_ack's result at the mock", lambda: ACK in mock.results)
            # The wake text named the tools (the install recorded the server).
            assert mock.seen("call the firstmate MCP tool wake_drain")
            # Claude Code started fm mcp and found its tools for the model.
            assert DRAIN in mock.raw[SEARCH] and ACK in mock.raw[SEARCH], mock.raw[SEARCH]
            drained = json.loads(mock.results[DRAIN])
            assert [row["payload"] for row in drained["rows"]
                    if MARK in json.dumps(row)], drained
            acked = json.loads(mock.results[ACK])
            assert acked["consumed"] >= 1 and acked["through"] == drained["ack"]["through"]
            # Acknowledged once: one call each, and nothing is left for the actor.
            assert [tool for tool, _ in mock.calls] == [SEARCH, DRAIN, ACK]
            queue = json.loads(fm(fm_env, "wake", "query", "--json").stdout)
            assert MARK not in json.dumps(queue["oldest"]) and queue["pending"]["main"] == 0, \
                queue
            # The turn's end parks on the successor watcher.
            eventually("the Stop hook parked after the handled turn", lambda: parked(home, epoch))
            eventually("a successor watcher",
                       lambda: (pid := healthy_watcher(fm_env)) and pid != first)
    finally:
        fm(fm_env, "arm", "--stop")
        mock.close()
