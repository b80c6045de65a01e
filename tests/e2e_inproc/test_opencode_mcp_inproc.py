"""The real OpenCode (npm ``opencode-ai``) and the firstmate MCP server ``fm install opencode``
registers in the project's ``.opencode/opencode.json``.

1. OpenCode starts the server and connects to it (``opencode mcp list``: the server started,
   the MCP handshake answered), with no step of the user's; after ``fm uninstall opencode`` it
   no longer lists it.
2. ``opencode serve``, supervised through the shim: a wake delivered through the bridge is
   drained and acknowledged through the server's tools. The mock model answers the wake with a
   call of ``firstmate_wake_drain`` (OpenCode names an MCP tool ``<server>_<tool>``), then,
   given the drain's result, one of ``firstmate_wake_ack`` with the ``ack`` the drain returned;
   OpenCode itself starts ``fm mcp`` and makes both calls. The row is consumed once, nothing is
   left pending, a successor watcher runs and the next wake reaches the model.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from firstmate.testing.procs import eventually

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mock_api import MockApi, ToolCall
from rig import DEADLINE, rig
from test_opencode_inproc import (  # noqa: F401  (pytestmark: node, git, timeout)
    opencode_bin,
    prepare,
    pytestmark,
    serve_first_turn,
    wake_reaches_serve,
)

MARK = "E2E-OC-MCP-WAKE"
DRAIN, ACK = "firstmate_wake_drain", "firstmate_wake_ack"


def _needs_sdk() -> None:
    from firstmate.plugin.mcpsdk import sdk_missing

    if sdk_missing() is not None:
        pytest.skip("the MCP SDK is not installed: fm install registers no server")


def _listed(opencode: Path, project: Path, env: dict[str, str]) -> str:
    done = subprocess.run([str(opencode), "mcp", "list"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120, check=False,
                          stdin=subprocess.DEVNULL)
    return re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)


def test_real_opencode_connects_to_the_registered_firstmate_server(tmp_path: Path) -> None:
    _needs_sdk()
    opencode = opencode_bin()
    project, home, user = tmp_path / "project", tmp_path / "fmhome", tmp_path / "user"
    project.mkdir()
    user.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FM_", "OPENCODE"))}
    env.update(HOME=str(user), FM_HOME=str(home), FIRSTMATE_KEYS_DIR=str(tmp_path / "keys"),
               XDG_CONFIG_HOME=str(user / ".config"), XDG_DATA_HOME=str(user / ".local/share"),
               OPENCODE_DISABLE_AUTOUPDATE="1", OPENCODE_DISABLE_MODELS_FETCH="1")
    fm = [sys.executable, "-m", "firstmate"]
    done = subprocess.run([*fm, "install", "opencode", "--project", str(project), "--home",
                           str(home)], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    listed = _listed(opencode, project, env)
    assert re.search(r"firstmate\s+connected", listed), listed
    done = subprocess.run([*fm, "uninstall", "opencode", "--project", str(project)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "firstmate" not in _listed(opencode, project, env)


def _text(content: object) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


class WakeTools:
    """The model's side of the script: the wake carrying :data:`MARK` is answered with
    ``wake_drain``, the drain's result with ``wake_ack`` given the drain's ``ack``, and
    everything else with the mock's usual text."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        #: tool → its result's text, as OpenCode handed it back to the model
        self.results: dict[str, str] = {}
        #: the tool names offered with the wake
        self.offered: list[str] = []

    def __call__(self, request: dict[str, Any]) -> list[ToolCall] | None:
        messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
        turn: list[dict[str, Any]] = []  # every message after the newest assistant one
        for message in reversed(messages):
            if message.get("role") == "assistant":
                break
            turn.insert(0, message)
        ours = {call.id: call for call in self.calls}
        answered = [m for m in turn if m.get("role") == "tool" and m.get("tool_call_id") in ours]
        if answered:
            call = ours[answered[-1]["tool_call_id"]]
            text = self.results[call.name] = _text(answered[-1].get("content"))
            if call.name != DRAIN:
                return None
            ack = json.loads(text)["ack"]
            return self._call(ACK, {"through": ack["through"], "generation": ack["generation"]})
        woken = any(MARK in _text(m.get("content")) for m in turn if m.get("role") == "user")
        if not woken or self.calls:
            return None
        self.offered = [str((tool.get("function") or {}).get("name"))
                        for tool in request.get("tools") or [] if isinstance(tool, dict)]
        return self._call(DRAIN, {}) if DRAIN in self.offered else None

    def _call(self, name: str, arguments: dict[str, object]) -> list[ToolCall]:
        call = ToolCall(name, arguments)
        self.calls.append(call)
        return [call]


def test_real_opencode_drains_and_acknowledges_a_wake_through_the_firstmate_mcp_tools(
        tmp_path: Path, mock: MockApi) -> None:
    _needs_sdk()
    binary = opencode_bin()
    model = WakeTools()
    with rig(tmp_path, "opencode") as r:
        prepare(r, mock)
        servers = json.loads((r.project / ".opencode" / "opencode.json").read_text())["mcp"]
        assert servers["firstmate"]["command"][-1] == "mcp", servers
        mock.script = model
        served = serve_first_turn(r, mock, binary, tmp_path)

        def diag() -> str:
            return f"calls: {model.calls}; results: {model.results}\n{served.diag()}"

        wake = wake_reaches_serve(r, mock, served, MARK, served.first)
        eventually("wake_ack's result at the mock", lambda: ACK in model.results, diag=diag,
                   deadline=DEADLINE)
        # The wake named the tools, and OpenCode offered the server's tools under its names.
        assert "call the firstmate MCP tool wake_drain" in wake.body, wake.body[-2000:]
        assert DRAIN in model.offered and ACK in model.offered, model.offered
        # OpenCode started fm mcp and ran both calls: the results are fm's own JSON.
        drained = json.loads(model.results[DRAIN])
        assert [row for row in drained["rows"] if MARK in row["payload"]], drained
        acked = json.loads(model.results[ACK])
        assert acked["through"] == drained["ack"]["through"], (drained, acked)
        assert acked["consumed"] == len(drained["rows"]), (drained, acked)
        # Consumed once: one call of each, and nothing is left in the queue.
        assert [call.name for call in model.calls] == [DRAIN, ACK], model.calls
        done = r.fm("wake", "query", "--json")
        assert done.returncode == 0, done.stderr
        queue = json.loads(done.stdout)
        assert queue["depth"] == 0 and queue["pending"]["main"] == 0, queue
        # Supervision goes on: a successor watcher, and the next wake reaches the model.
        successor = eventually("a healthy successor after the wake turn",
                               lambda: r.successor(served.first), diag=diag, deadline=DEADLINE)
        later = wake_reaches_serve(r, mock, served, "WAKE-OC-NEXT", successor)
        assert [call.name for call in model.calls] == [DRAIN, ACK], model.calls
        history = [m for m in json.loads(later.body)["messages"] if m.get("role") == "user"]
        assert sum(MARK in _text(m.get("content")) for m in history) == 1, later.body[-3000:]
        assert served.proc.poll() is None, diag()
