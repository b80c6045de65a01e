"""Hostile arguments never crash ``fm mcp`` and never reach a shell or tmux as anything but
text: every tool's arguments fuzzed through the SDK's own client (huge strings, control and
bidi characters, wrong types, missing and unknown fields, names like ``-rf``,
``%1;kill-server``, ``#(touch x)``), and raw protocol junk written straight to its stdin. Every
answer is a result or a one-line error with its exit status; stdout carries protocol frames
only; the server still answers afterwards."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from firstmate.store import crew
from firstmate.testing.procs import eventually
from fleet_support import Fleet
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from mcp_support import McpClient, Raw, frame

Connect = Callable[..., McpClient]
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="the tmux binary is not installed: crews run in tmux")

#: Names and texts an attacker (or a confused model) might pass. ``w1`` is the registered crew,
#: so some calls get past the name and reach its pane with the rest.
HOSTILE = ["-rf", "--help", "-n", "%1;kill-server", "#(touch pwned)", "w1;kill-server",
           "$(touch pwned)", "`touch pwned`", "a\nfm: forged", "\x1b[2J\x1b]0;t\x07",
           "\u202eevil", "\u200b", "..", "../../etc/passwd", "/", "", " ", "w1", "db",
           "firstmate:0.0", "%0", "x" * 200_000, "é" * 70_000, "\t", "\r\n", "'\"", "{}",
           "answered: key=db x", "fakecrew", "nosuchharness"]
TEXT = st.one_of(st.sampled_from(HOSTILE),
                 st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300))
VALUE = st.recursive(
    st.one_of(TEXT, st.integers(min_value=-(2 ** 70), max_value=2 ** 70), st.booleans(),
              st.none(), st.floats(allow_nan=False, allow_infinity=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=8)
PARAMS = {
    "fleet_status": [], "wake_drain": [], "crew_list": [],
    "wake_ack": ["through", "generation"],
    "crew_peek": ["name", "lines"], "crew_steer": ["name", "text"],
    "crew_answer": ["name", "key", "answer", "send"],
    "crew_spawn": ["name", "harness", "task", "cwd", "worktree", "window_name", "session",
                   "harness_args", "fm_command"],
    "crew_stop": ["name"],
}


#: Arguments that are not text, and what they are.
TYPED = {"through": st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
         "lines": st.integers(min_value=-5, max_value=2000), "send": st.booleans(),
         "harness_args": st.lists(TEXT, max_size=300)}


def _value(tool: str, name: str) -> st.SearchStrategy[Any]:
    """Mostly a value of the right type (hostile text for text), sometimes anything. The
    registered crew's name is drawn often, so calls reach its pane (crew_stop never gets it:
    the crew stays for the calls after)."""
    right = TYPED.get(name, TEXT)
    if name == "name" and tool != "crew_stop":
        right = st.one_of(st.just("w1"), st.just("w1"), right)
    return st.one_of(right, right, VALUE)


def _arguments(tool: str) -> st.SearchStrategy[dict[str, Any]]:
    """Mostly the tool's own arguments with hostile values; sometimes unknown ones too."""
    names = PARAMS[tool]
    values = {name: _value(tool, name) for name in names}
    every = st.fixed_dictionaries(values)
    some = st.fixed_dictionaries({}, optional=values)
    extra = st.dictionaries(st.one_of(st.sampled_from([*names, "bogus", "", "-rf"]), TEXT),
                            VALUE, max_size=len(names) + 1)
    return st.one_of(every, every, some, extra)


CALL = st.sampled_from(sorted(PARAMS)).flatmap(
    lambda tool: st.tuples(st.just(tool), _arguments(tool)))


@pytest.fixture
def target(fleet: Fleet, connect: Connect) -> Iterator[tuple[Fleet, McpClient]]:
    """A server on a home with one crew, ``w1``, whose pane runs ``cat`` into /dev/null: text
    typed there goes nowhere, whatever it says."""
    made = fleet.tmux("new-session", "-d", "-s", "crews", "-x", "120", "-y", "40",
                      "cat > /dev/null")
    assert made.returncode == 0, made.stderr
    added = fleet.fm("crew", "add", "w1", "--pane", "crews:0.0")
    assert added.returncode == 0, added.stderr
    fleet.fm("wake", "append", "signal", "w1.status", "signal: w1.status: done: x")
    yield fleet, connect(dict(fleet.env))


def no_pwned(root: Path) -> None:
    assert not [p for p in root.rglob("pwned*")], "a hostile argument ran a command"


@needs_tmux
@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(call=CALL)
def test_fuzzed_arguments_get_a_result_or_one_error_line(
        target: tuple[Fleet, McpClient], call: tuple[str, dict[str, Any]]) -> None:
    fleet, client = target
    tool, args = call
    result = client.call(tool, args)
    event(f"{tool}: {'done' if not result.is_error else 'refused'}")
    if result.is_error:
        line = result.content[0].text
        assert isinstance(line, str) and line.startswith("fm: ") and "\n" not in line, line
        assert line.isprintable() and len(line) < 2100, line[:300]
        assert "internal error" not in line, line
        assert isinstance(result.structured_content, dict)
        assert result.structured_content["exit_code"] in (1, 2, 3, 4, 5), line
    else:
        assert isinstance(result.structured_content, dict)
        assert json.loads(result.content[0].text) == result.structured_content
    no_pwned(fleet.tmp)


@needs_tmux
def test_after_the_fuzz_the_server_and_tmux_are_whole(target: tuple[Fleet, McpClient]) -> None:
    fleet, client = target
    for name in HOSTILE:
        for tool, args in (("crew_steer", {"name": "w1", "text": name}),
                           ("crew_peek", {"name": name}),
                           ("crew_answer", {"name": "w1", "key": name, "answer": name}),
                           ("crew_spawn", {"name": name, "harness": name, "cwd": name,
                                           "session": name, "window_name": name}),
                           ("crew_stop", {"name": name if name != "w1" else "w2"})):
            result = client.call(tool, args)
            if result.is_error:
                assert "internal error" not in result.content[0].text
    client.ping()
    status = client.ok("fleet_status")
    assert [(c["name"], c["pane_state"]) for c in status["crews"]] == [("w1", "live")]
    assert fleet.tmux("list-sessions", "-F", "#{session_name}").stdout.split() == ["crews"]
    assert "Traceback" not in client.stderr()
    no_pwned(fleet.tmp)


@needs_tmux
def test_hostile_window_and_session_names_reach_tmux_as_text(fleet: Fleet,
                                                              connect: Connect) -> None:
    client = connect(dict(fleet.env))
    done = client.ok("crew_spawn", {"name": "w1", "harness": "fakecrew", "task": "$(touch pwned)",
                                    "window_name": "w;kill-server #(touch pwned)",
                                    "session": "s;kill-server #(touch pwned2)"})
    assert (done["session"], done["window"]) == ("s;kill-server #(touch pwned2)",
                                                 "w;kill-server #(touch pwned)")
    eventually("the crew's first status line", lambda: crew.last_line(fleet.home, "w1"))
    windows = fleet.tmux("list-windows", "-a", "-F", "#{session_name}|#{window_name}").stdout
    assert "s;kill-server #(touch pwned2)|w;kill-server #(touch pwned)" in windows
    assert client.ok("crew_steer", {"name": "w1", "text": "%1;kill-server"})["sent"] == \
        "%1;kill-server"
    eventually("the steered line", lambda: "%1;kill-server" in fleet.turns("w1"))
    assert client.ok("crew_list")["crews"][0]["pane_state"] == "live"
    no_pwned(fleet.tmp)


#: (what is written to the server's stdin, whether it must be answered with an error). Frames
#: that do not parse as JSON-RPC (not JSON, bytes that are not UTF-8, a lone surrogate, nesting
#: deeper than the parser takes) have no id to answer: the SDK drops them and reads on.
JUNK: list[tuple[bytes, bool]] = [
    (b"this is not json\n", False),
    (b"{}\n", False),
    (b"[]\n", False),
    (b"\xff\xfe\x00garbage\n", False),
    (b'{"jsonrpc": "2.0", "id": 90, "method": "tools/call", "params": {"name": "crew_peek", '
     b'"arguments": [1, 2]}}\n', True),
    (b'{"jsonrpc": "2.0", "id": 91, "method": "tools/call", "params": {"name": "crew_peek", '
     b'"arguments": "w1"}}\n', True),
    (b'{"jsonrpc": "2.0", "id": 92, "method": "tools/call", "params": {}}\n', True),
    (b'{"jsonrpc": "2.0", "id": 93, "method": "tools/call"}\n', True),
    (b'{"jsonrpc": "2.0", "id": 94, "method": "tools/call", "params": {"name": 5}}\n', True),
    (b'{"jsonrpc": "2.0", "id": 95, "method": "no/such/method", "params": {}}\n', True),
    (b'{"jsonrpc": "2.0", "id": 96, "method": "tools/call", "params": {"name": "crew_steer", '
     b'"arguments": {"name": "w1", "text": "a\\u0000b"}}}\n', True),
    (b'{"jsonrpc": "2.0", "id": 97, "method": "tools/call", "params": {"name": "crew_steer", '
     b'"arguments": {"name": "w1", "text": "\\ud800"}}}\n', False),
    (b'{"jsonrpc": "2.0", "id": 98, "method": "tools/call", "params": {"name": "wake_ack", '
     b'"arguments": {"through": NaN, "generation": "g"}}}\n', False),
    (b'{"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": {"name": "crew_list", '
     b'"arguments": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}\n", False),
    (b'{"jsonrpc": "2.0", "id": 100, "method": "tools/call", "params": {"name": "crew_steer", '
     b'"arguments": {"name": "w1", "text": "' + b"y" * 2_000_000 + b'"}}}\n', True),
    (b'{"jsonrpc": "2.0", "id": 101, "method": "tools/call", "params": {"name": "crew_steer", '
     b'"arguments": {"name": "-rf"}}}\n', True),
]


def test_raw_protocol_junk_gets_errors_and_stdout_carries_only_frames(
        tmp_path: Path) -> None:
    env = {**os.environ, "FM_HOME": str(tmp_path / "home"),
           "FM_TMUX_SOCKET": f"fm-mcp-raw-{os.getpid()}"}
    raw = Raw(env, tmp_path)
    try:
        assert raw.initialize()["result"]["serverInfo"]["name"] == "firstmate"
        for probe, (junk, answered) in enumerate(JUNK, start=1000):
            raw.send(junk)
            # The server reads on: a ping after each piece of junk is answered.
            raw.send(frame(id=probe, method="ping"))
            assert raw.answer(probe)["result"] == {}, junk[:100]
            if answered:
                request = json.loads(junk)["id"]
                got = raw.answer(request)
                assert "error" in got or got["result"].get("isError") is True, got
        texts = {got["id"]: got["result"]["content"][0]["text"] for got in raw.seen
                 if isinstance(got.get("result"), dict) and got["result"].get("isError")}
        assert "holds a NUL character" in texts[96]
        assert "is 2000000 bytes long; at most 131072" in texts[100]
        assert "missing argument 'text'" in texts[101]
        raw.send(frame(id=2, method="tools/call", params={"name": "fleet_status",
                                                           "arguments": {}}))
        status = raw.answer(2)["result"]
        assert status["isError"] is False
        assert status["structuredContent"]["home"] == str(tmp_path / "home")
    finally:
        code, err = raw.close()
    assert code == 0, err.decode(errors="replace")[-2000:]
    assert b"Traceback" not in err
