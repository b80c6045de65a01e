"""``fm mcp`` with the core alone: without the MCP SDK it says in one line how to add it (exit 1),
its help and refusals need no SDK, only one module imports the SDK, and a tool's arguments and
failures are read and worded as the command line reads and words its own (the server itself
is tested through the SDK's own client in tests/mcp, tox -e mcp)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from firstmate.base.errors import ConflictError, FirstmateError, StateError, UsageError
from firstmate.mcp import command, results
from firstmate.mcp.params import MAX_TEXT_BYTES, Param, input_schema, read
from firstmate.mcp.tools import BY_NAME, TOOLS
from firstmate.store.home import Home
from hypothesis import given
from hypothesis import strategies as st

CORE = Path(__file__).resolve().parents[2] / "core" / "firstmate"


def fm(env: Mapping[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "firstmate", *args], env=dict(env), cwd=cwd,
                          input="", capture_output=True, text=True, timeout=60, check=False)


def shadowed(tmp_path: Path, env: Mapping[str, str], *, version: str | None = None) -> dict[str, str]:
    """*env* with an ``mcp`` first on the path that is not the SDK: one that fails to import,
    or (with *version*) an old release's layout and metadata."""
    shadow = tmp_path / "shadow"
    (shadow / "mcp").mkdir(parents=True)
    if version is None:
        (shadow / "mcp" / "__init__.py").write_text('raise ImportError("no mcp here")\n')
    else:
        (shadow / "mcp" / "__init__.py").write_text("")
        (shadow / "mcp" / "server").mkdir()
        (shadow / "mcp" / "server" / "__init__.py").write_text("")
        (shadow / "mcp" / "server" / "lowlevel.py").write_text("")
        meta = shadow / f"mcp-{version}.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mcp\nVersion: {version}\n")
    paths = [str(shadow), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def test_without_the_sdk_one_line_says_how_to_add_it(fm_env: Mapping[str, str],
                                                     tmp_path: Path) -> None:
    done = fm(shadowed(tmp_path, fm_env), "mcp")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("fm: mcp: the MCP SDK (the firstmate[mcp] extra) is not "
                                  "installed in this fm's environment; add it with: ")
    assert "'mcp>=2.3,<3'" in done.stderr


def test_an_sdk_of_another_major_version_is_named(fm_env: Mapping[str, str],
                                                  tmp_path: Path) -> None:
    done = fm(shadowed(tmp_path, fm_env, version="1.9.4"), "mcp")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("fm: mcp: this fm's environment has the MCP SDK 1.9.4 and fm "
                                  "mcp speaks version 2; install that one with: ")
    assert done.stderr.count("\n") == 1


def test_help_and_bad_options_need_no_sdk(fm_env: Mapping[str, str], tmp_path: Path) -> None:
    env = shadowed(tmp_path, fm_env)
    helped = fm(env, "mcp", "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: fm mcp [-h] [--home DIR]")
    bad = fm(env, "mcp", "--homme", "x")
    assert bad.returncode == 2 and bad.stderr.startswith("fm: mcp: unrecognized arguments: --homme")
    empty = fm(env, "mcp", "--home", " ")
    assert empty.returncode == 2 and "--home needs a directory" in empty.stderr


@pytest.mark.parametrize("marker", ["FM_CREW", "FM_TASK_ID"])
def test_a_crews_session_is_refused_before_anything_is_read(fm_env: Mapping[str, str],
                                                            tmp_path: Path, marker: str) -> None:
    done = fm({**shadowed(tmp_path, fm_env), marker: "w1"}, "mcp")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"fm: mcp: refusing to run in a crew's session ({marker}=w1): only "
                           "the captain acts on the wake queue and the crews through MCP tools; "
                           "report with fm crew status\n")
    assert command.CAPTAIN_ONLY in done.stderr


def test_the_extra_is_the_requirement_the_command_names() -> None:
    project = tomllib.loads((CORE.parents[1] / "pyproject.toml").read_text())
    assert project["project"]["optional-dependencies"]["mcp"] == [command.SDK_SPEC]


def test_only_the_server_module_imports_the_sdk() -> None:
    importers = []
    for path in sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if any(name.split(".")[0] in ("mcp", "mcp_types", "anyio") for name in names):
                importers.append(path.relative_to(CORE).as_posix())
    assert sorted(set(importers)) == ["mcp/server.py", "plugin/mcpsdk.py"]  # (mcpsdk: a probe)


def test_the_tools_import_without_the_sdk(tmp_path: Path) -> None:
    code = ("import sys, firstmate.mcp.command, firstmate.mcp.tools, firstmate.mcp.results\n"
            "print(sorted(n for n in sys.modules if n.split('.')[0] in ('mcp', 'mcp_types', "
            "'anyio', 'pydantic')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


# --- the arguments -----------------------------------------------------------------------------


PARAMS = (Param("name", "string", "the crew's name", required=True),
          Param("lines", "integer", "how many lines", default=20, minimum=1, maximum=1000),
          Param("send", "boolean", "type it too", default=False),
          Param("args", "strings", "more words", default=()))


def test_the_schema_is_the_declared_arguments() -> None:
    assert input_schema(PARAMS) == {
        "type": "object", "additionalProperties": False, "required": ["name"],
        "properties": {
            "name": {"type": "string", "description": "the crew's name"},
            "lines": {"type": "integer", "description": "how many lines", "default": 20,
                      "minimum": 1, "maximum": 1000},
            "send": {"type": "boolean", "description": "type it too", "default": False},
            "args": {"type": "array", "items": {"type": "string"}, "maxItems": 256,
                     "description": "more words", "default": []}}}
    assert read("t", PARAMS, {"name": "w1"}) == {"name": "w1", "lines": 20, "send": False,
                                                 "args": ()}
    assert read("t", PARAMS, {"name": "w1", "lines": 5.0, "send": None, "args": ["-rf"]}) == {
        "name": "w1", "lines": 5, "send": False, "args": ("-rf",)}


@pytest.mark.parametrize(("given", "line"), [
    ([], "t: the arguments must be an object, not a list; see t's input schema"),
    ({}, "t: missing argument 'name' (the crew's name); see t's input schema"),
    ({"name": "w", "nmae": 1}, "t: unknown argument 'nmae' (t takes name, lines, send, args); "
                               "see t's input schema"),
    ({"name": 5}, "t: argument 'name' must be a string, not a number; see t's input schema"),
    ({"name": "w", "lines": True}, "t: argument 'lines' must be a whole number, not true or "
                                   "false 'True'; see t's input schema"),
    ({"name": "w", "lines": 0}, "t: argument 'lines' must be 1 to 1000, not 0"),
    ({"name": "w", "lines": 1.5}, "t: argument 'lines' must be a whole number, not a number "
                                  "'1.5'; see t's input schema"),
    ({"name": "w", "send": "yes"}, "t: argument 'send' must be true or false, not a string; "
                                   "see t's input schema"),
    ({"name": "w", "args": "x"}, "t: argument 'args' must be a list of strings, not a string; "
                                 "see t's input schema"),
    ({"name": "w", "args": ["a", 1]}, "t: argument 'args'[1] must be a string, not a number; "
                                      "see t's input schema"),
    ({"name": "a\x00b"}, "t: argument 'name' holds a NUL character, which no command line can "
                         "carry; nothing was done"),
    ({"name": "\ud800"}, "t: argument 'name' is not valid Unicode text (it holds a lone "
                         "surrogate); nothing was done"),
    ({"name": "é" * MAX_TEXT_BYTES}, f"t: argument 'name' is {2 * MAX_TEXT_BYTES} bytes long; "
                                     f"at most {MAX_TEXT_BYTES} (what one command-line argument "
                                     "may hold)"),
    ({"name": "w", "\nfm: forged\x1b[2J": 1}, "t: unknown argument '\\nfm: forged\\x1b[2J' (t "
                                             "takes name, lines, send, args); see t's input "
                                             "schema"),
])
def test_bad_arguments_are_one_usage_line(given: object, line: str) -> None:
    with pytest.raises(UsageError) as refused:
        read("t", PARAMS, given)
    assert refused.value.message == line
    assert refused.value.exit_code == 2


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=3) |
                    st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=10)


@given(given=JSON | st.dictionaries(st.sampled_from(["name", "lines", "send", "args", "x"]),
                                    JSON, max_size=5))
def test_any_json_is_read_or_refused_in_one_printable_line(given: Any) -> None:
    try:
        found = read("t", PARAMS, given)
    except UsageError as exc:
        text, structured, ours = results.failure(exc)
        assert ours and "\n" not in text and text.isprintable() and structured["exit_code"] == 2
    else:
        assert isinstance(found["name"], str) and 1 <= found["lines"] <= 1000


# --- what a call gives back ------------------------------------------------------------------


def test_failures_are_the_command_lines_with_the_exit_status_named() -> None:
    assert results.failure(UsageError("crew steer: x\n y"))[:2] == (
        "fm: crew steer: x y (exit 2 USAGE)",
        {"error": "crew steer: x y", "exit_code": 2, "exit": "USAGE"})
    assert results.failure(ConflictError("taken"))[0] == "fm: taken (exit 3 CONFLICT)"
    assert results.failure(StateError("bad home"))[0] == "fm: bad home (exit 4 STATE)"
    assert results.failure(FirstmateError("nope"))[0] == "fm: nope (exit 1 FAILED)"
    denied = PermissionError(13, "Permission denied", "/x/state")
    assert results.failure(denied)[0] == (
        "fm: cannot use /x/state: Permission denied; free space or fix the path and its "
        "permissions, then retry (exit 4 STATE)")
    text, structured, ours = results.failure(KeyError("boom\x1b[2J"))
    assert not ours and text.startswith("fm: internal error: KeyError: ") and "\x1b" not in text
    assert structured["exit_code"] == 1
    long = results.failure(UsageError("x" * 10_000))[0]
    assert len(long) < results.MAX_ERROR + 30 and "..." in long


def test_a_result_is_its_json_line_and_the_same_object() -> None:
    text, structured = results.success({"b": [1, "é"], "a": None, "p": Path("/x")})
    assert text == '{"a": null, "b": [1, "\\u00e9"], "p": "/x"}'
    assert json.loads(text) == structured == {"a": None, "b": [1, "é"], "p": "/x"}


# --- the tools, called in-process (no SDK) ---------------------------------------------------


def test_the_tool_list_is_the_documented_one() -> None:
    assert [tool.name for tool in TOOLS] == [
        "fleet_status", "wake_drain", "wake_ack", "crew_list", "crew_peek", "crew_steer",
        "crew_answer", "crew_spawn", "crew_stop"]
    doc = (CORE.parents[1] / "docs" / "mcp.md").read_text()
    for tool in TOOLS:
        assert f"`{tool.name}`" in doc, tool.name
        for param in tool.params:
            assert f"`{param.name}`" in doc, (tool.name, param.name)


def test_a_drain_and_its_ack_through_the_tools_are_the_commands(fm_home: Home) -> None:
    env = dict(os.environ)
    assert fm(env, "wake", "append", "signal", "a", "one").returncode == 0
    drained = BY_NAME["wake_drain"].call(env, {})
    assert drained["ack"] == {"through": 1, "generation": drained["generation"]}
    assert [row["seq"] for row in drained["rows"]] == [1]
    acked = BY_NAME["wake_ack"].call(env, drained["ack"])
    assert (acked["consumed"], acked["retired"]) == (1, True)
    with pytest.raises(UsageError, match="beyond the last wake row presented to you"):
        BY_NAME["wake_ack"].call(env, {"through": 5, "generation": drained["generation"]})
