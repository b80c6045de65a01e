"""Every tool of ``fm mcp`` through the SDK's own stdio client: what it lists, what each call
returns (the same object as the command behind it), and the crews' tools against a real tmux
server on a private socket with the stand-in crew harness."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from firstmate.store import crew
from firstmate.store.home import Home
from firstmate.testing.procs import eventually
from fleet_support import Fleet, spawned
from mcp_support import McpClient
from wakeq_support import fm

Connect = Callable[..., McpClient]
TOOLS = {"fleet_status", "wake_drain", "wake_ack", "crew_list", "crew_peek", "crew_steer",
         "crew_answer", "crew_spawn", "crew_stop"}
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="the tmux binary is not installed: crews run in tmux")


def test_the_tools_are_listed_with_typed_schemas_and_say_when_to_use_them(
        fm_home: Home, connect: Connect) -> None:
    client = connect(dict(os.environ))
    assert client.init.server_info.name == "firstmate"
    assert "wake_drain" in (client.init.instructions or "")
    tools = {tool.name: tool for tool in client.tools()}
    assert set(tools) == TOOLS
    for tool in tools.values():
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert tool.description and "Same as `fm " in tool.description
        assert len(tool.description) > 200, tool.name
        for prop in schema["properties"].values():
            assert prop["type"] in ("string", "integer", "boolean", "array")
            assert len(prop["description"]) > 10
    ack = tools["wake_ack"].input_schema
    assert ack["required"] == ["through", "generation"]
    assert ack["properties"]["through"] == {
        "type": "integer", "minimum": 0, "description": ack["properties"]["through"]["description"]}
    peek = tools["crew_peek"].input_schema["properties"]["lines"]
    assert (peek["minimum"], peek["maximum"], peek["default"]) == (1, 1000, 20)
    spawn = tools["crew_spawn"].input_schema
    assert spawn["required"] == ["name", "harness"]
    assert spawn["properties"]["harness_args"]["items"] == {"type": "string"}
    assert "wake_ack" in (tools["wake_drain"].description or "")
    hints = {name: tool.annotations for name, tool in tools.items()}
    assert all(hint is not None for hint in hints.values())
    assert [name for name, hint in sorted(hints.items()) if hint and hint.read_only_hint] == [
        "crew_peek", "fleet_status"]
    assert [name for name, hint in hints.items() if hint and hint.destructive_hint] == [
        "crew_stop"]


def test_fleet_status_is_fm_status_with_the_crews(fm_home: Home, connect: Connect) -> None:
    fm(fm_home, "wake", "append", "signal", "a", "signal: a.status: done: x")
    fm(fm_home, "crew", "add", "byhand", "--pane", "%999999")
    client = connect(dict(os.environ))
    found = client.ok("fleet_status")
    status = json.loads(fm(fm_home, "status", "--json").stdout)
    listed = json.loads(fm(fm_home, "crew", "list", "--json").stdout)["crews"]
    assert set(found) == {*status, "crews"}
    for key in ("home", "home_source", "queue", "episode", "session_lock", "away", "bridges"):
        assert found[key] == status[key], key
    assert found["watcher"]["healthy"] is False and found["queue"]["depth"] == 1
    assert [c["name"] for c in found["crews"]] == ["byhand"] == [c["name"] for c in listed]
    assert found["crews"][0]["pane_state"] == listed[0]["pane_state"] == "gone"
    assert client.ok("crew_list") == {"crews": found["crews"]}
    # Reading changed nothing: the row is still queued and unclaimed.
    assert json.loads(fm(fm_home, "wake", "query", "--json").stdout)["pending"]["main"] == 1


def test_a_home_not_made_yet_is_no_error_and_is_not_made(tmp_path: Path,
                                                         connect: Connect) -> None:
    env = {**os.environ, "FM_HOME": str(tmp_path / "nothing-yet")}
    client = connect(env)
    assert client.ok("crew_list") == {"crews": []}
    assert client.ok("fleet_status")["queue"]["depth"] == 0
    assert not (tmp_path / "nothing-yet").exists()
    # A tool that needs the home says what fm crew peek says, and still makes no home.
    said = subprocess.run([sys.executable, "-m", "firstmate", "crew", "peek", "w1"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert said.returncode == 4 and "no longer exists" in said.stderr
    assert client.error("crew_peek", {"name": "w1"}) == f"{said.stderr.rstrip()} (exit 4 STATE)"
    assert not (tmp_path / "nothing-yet").exists()


def test_the_home_is_found_as_fm_finds_it_and_home_names_one(tmp_path: Path,
                                                             connect: Connect) -> None:
    project = tmp_path / "project"
    (project / ".firstmate").mkdir(parents=True)
    (project / "src").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "FM_HOME"}
    client = connect(env, cwd=project / "src")
    found = client.ok("fleet_status")
    assert (found["home"], found["home_source"]) == (str(project / ".firstmate"), "found")
    assert f"serving home {project / '.firstmate'}" in client.stderr()
    other = tmp_path / "other"
    named = connect(env, "--home", str(other), cwd=project / "src")
    assert named.ok("fleet_status")["home"] == str(other)
    assert f"serving home {other} (--home)" in named.stderr()


@needs_tmux
def test_every_crew_tool_on_a_real_fleet(fleet: Fleet, connect: Connect) -> None:
    project = fleet.tmp / "project"
    project.mkdir()
    client = connect(dict(fleet.env))
    done = client.ok("crew_spawn", {"name": "w1", "harness": "fakecrew", "task": "fix the bug",
                                    "cwd": str(project), "harness_args": ["--flag=1"],
                                    "window_name": "builder", "session": "crews"})
    member = crew.get(fleet.home, "w1")
    assert done["pane"] == member.pane and (done["session"], done["window"]) == ("crews",
                                                                                 "builder")
    assert done["cwd"] == str(project) and done["worktree"] is False
    assert "note: a fake crew asks nothing" not in json.dumps(done)  # notes are fields
    assert any("fake crew" in note for note in done["notes"])
    record = fleet.started("w1")
    assert "--flag=1" in record["argv"] and record["env"]["FM_CREW"] == "w1"
    assert "fix the bug" in record["argv"][record["argv"].index("--") + 1]
    eventually("the crew's first status line", lambda: crew.last_line(fleet.home, "w1"))
    listed = client.ok("crew_list")["crews"]
    assert [(c["name"], c["harness"], c["pane_state"]) for c in listed] == [
        ("w1", "fakecrew", "live")]
    assert listed[0]["last_status"]["text"] == "working: started"
    # Steering types the text literally: tmux's separators and formats are text.
    steered = client.ok("crew_steer", {"name": "w1", "text": "run it; #(touch pwned)\nnow"})
    assert steered == {"name": "w1", "pane": member.pane, "sent": "run it; #(touch pwned) now"}
    eventually("the steered line", lambda: "run it; #(touch pwned) now" in fleet.turns("w1"))
    assert not list(fleet.tmp.rglob("pwned"))
    peeked = client.ok("crew_peek", {"name": "w1", "lines": 5})
    assert (peeked["name"], peeked["pane"], peeked["state"]) == ("w1", member.pane, "live")
    assert 0 < len(peeked["lines"]) <= 5 and peeked["note"] is None
    assert any("fakecrew>" in line for line in peeked["lines"])
    # A decision: the drain lists it with its answer; the answer closes it and is typed.
    assert fleet.fm("crew", "status", "w1", "needs-decision: key=db which one?").returncode == 0
    drained = client.ok("wake_drain")
    assert [(d["crew"], d["key"]) for d in drained["decisions"]] == [("w1", "db")]
    turns = len(fleet.turns("w1"))
    answered = client.ok("crew_answer", {"name": "w1", "key": "db", "answer": "postgres;",
                                         "send": True})
    assert answered == {"name": "w1", "key": "db", "answered": True, "pane": member.pane,
                        "sent": True}
    eventually("the typed answer", lambda: len(fleet.turns("w1")) > turns)
    assert fleet.turns("w1")[turns] == "answered: key=db postgres;"
    assert client.ok("crew_list")["crews"][0]["open_decisions"] == 0
    again = client.error("crew_answer", {"name": "w1", "key": "db", "answer": "x"})
    assert "(exit 2 USAGE)" in again
    stopped = client.ok("crew_stop", {"name": "w1"})
    assert stopped["killed"] is True and stopped["pane"] == member.pane
    assert stopped["pane_log"] == str(fleet.home.crew_dir / "w1.pane-log")
    assert not crew.exists(fleet.home, "w1")
    assert client.ok("crew_list") == {"crews": []}


@needs_tmux
def test_a_crews_refusals_are_the_commands_own_lines(fleet: Fleet, connect: Connect) -> None:
    spawned(fleet, "w1", "--", "task")
    pane = crew.get(fleet.home, "w1").pane
    fleet.tmux("kill-pane", "-t", pane)
    client = connect(dict(fleet.env))
    cases = [
        ("crew_steer", {"name": "w1", "text": "hello"}, ["crew", "steer", "w1", "hello"]),
        ("crew_peek", {"name": "w1"}, ["crew", "peek", "w1"]),
        ("crew_answer", {"name": "w1", "key": "k", "answer": "a", "send": True},
         ["crew", "answer", "w1", "--key", "k", "--send", "a"]),
        ("crew_steer", {"name": "alpah", "text": "x"}, ["crew", "steer", "alpah", "x"]),
        ("crew_spawn", {"name": "w1", "harness": "fakecrew"},
         ["crew", "spawn", "w1", "--harness", "fakecrew"]),
        ("crew_spawn", {"name": "w2", "harness": "fakecrew", "session": "a:b"},
         ["crew", "spawn", "w2", "--harness", "fakecrew", "--session", "a:b"]),
        ("crew_spawn", {"name": "w2", "harness": "nosuchharness"},
         ["crew", "spawn", "w2", "--harness", "nosuchharness"]),
    ]
    for tool, args, argv in cases:
        said = fleet.fm(*argv)
        assert said.returncode != 0 and said.stderr.count("\n") == 1, said
        line = client.error(tool, args)
        assert line == f"{said.stderr.rstrip()} (exit {said.returncode} " \
            f"{client.call(tool, args).structured_content['exit']})", (tool, line, said.stderr)
    assert f"pane {pane} is gone" in client.error("crew_steer", {"name": "w1", "text": "x"})
    stopped = client.ok("crew_stop", {"name": "w1"})
    assert stopped["killed"] is False and not crew.exists(fleet.home, "w1")
