"""wake_drain → wake_ack through the SDK's own stdio client, with ``fm wake drain``'s rules:
an acknowledgement consumes only what a drain presented to its actor, a stale presentation
consumes what it showed and names the newer episode, an acknowledgement beyond what was
presented is refused whole, another actor's rows are never taken, a generation no drain printed
retires nothing, and a crew's session never gets the server at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from firstmate.store.home import Home
from mcp_support import McpClient
from wakeq_support import claims, finish, fm, live_owner, set_episode

Connect = Callable[..., McpClient]


def query(home: Home) -> dict[str, object]:
    out = fm(home, "wake", "query", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert isinstance(data, dict)
    return data


def test_a_drain_is_the_commands_json_and_its_ack_consumes_it(fm_home: Home,
                                                             connect: Connect) -> None:
    fm(fm_home, "wake", "append", "signal", "a.status", "signal: a.status: done: one")
    fm(fm_home, "wake", "append", "check", "ci", "check: ci: red")
    client = connect(dict(os.environ))
    drained = client.ok("wake_drain")
    gen = drained["generation"]
    assert drained["actor"] == "main" and drained["ack_through"] == 2
    assert drained["ack"] == {"through": 2, "generation": gen}
    assert drained["ack_command"] == f"fm wake drain --ack-through 2 --recovery-generation {gen}"
    assert [(r["seq"], r["kind"]) for r in drained["rows"]] == [(1, "signal"), (2, "check")]
    assert len(drained["explain"]) == 2 and drained["notices"] == []
    # The same keys as the command's --json, plus the acknowledgement's arguments.
    cli = json.loads(fm(fm_home, "wake", "drain", "--json").stdout)
    assert set(drained) == {*cli, "ack"}
    assert cli["rows"] == drained["rows"] and cli["ack_through"] == 2
    assert claims(fm_home) == {1: "main", 2: "main"}  # presented: claimed, not consumed
    acked = client.ok("wake_ack", {"through": 2, "generation": gen})
    assert (acked["consumed"], acked["retired"], acked["remaining"]) == (2, True, 0)
    assert acked["actor"] == "main" and acked["notices"] == []
    assert acked["confirmation"].startswith("WAKE ACKNOWLEDGED through row 2: 2 rows consumed")
    assert query(fm_home)["episode"] == f"acked:handling:{gen}" and claims(fm_home) == {}
    # Repeating it consumes nothing and is no error; the next drain has nothing.
    again = client.ok("wake_ack", {"through": 2, "generation": gen})
    assert again["consumed"] == 0 and again["notices"] == []
    empty = client.ok("wake_drain")
    assert (empty["rows"], empty["ack"], empty["ack_through"]) == ([], None, None)


def test_the_command_and_the_tools_share_one_presentation(fm_home: Home,
                                                         connect: Connect) -> None:
    fm(fm_home, "wake", "append", "signal", "a", "one")
    client = connect(dict(os.environ))
    # Drained by the command, acknowledged by the tool.
    cli = json.loads(fm(fm_home, "wake", "drain", "--json").stdout)
    acked = client.ok("wake_ack", {"through": cli["ack_through"], "generation": cli["generation"]})
    assert acked["consumed"] == 1 and acked["retired"] is True
    # Drained by the tool, acknowledged by the printed command.
    fm(fm_home, "wake", "append", "signal", "b", "two")
    drained = client.ok("wake_drain")
    out = fm(fm_home, "wake", "drain", "--ack-through", str(drained["ack"]["through"]),
             "--recovery-generation", drained["ack"]["generation"])
    assert out.returncode == 0 and out.stdout.startswith("WAKE ACKNOWLEDGED through row 2: 1 row")


def test_an_ack_beyond_what_was_presented_is_refused_whole(fm_home: Home,
                                                          connect: Connect) -> None:
    client = connect(dict(os.environ))
    fm(fm_home, "wake", "append", "signal", "a", "presented")
    gen = client.ok("wake_drain")["generation"]
    fm(fm_home, "wake", "append", "signal", "b", "appended after the drain")
    line = client.error("wake_ack", {"through": 99, "generation": gen})
    assert line == (
        "fm: wake drain: --ack-through 99 is beyond the last wake row presented to you (1); "
        f"nothing was acknowledged: run fm wake drain --ack-through 1 --recovery-generation {gen} "
        "after handling it (exit 2 USAGE)")
    assert claims(fm_home) == {1: "main", 2: None}
    # Through the row appended since: also beyond what was presented.
    assert "beyond the last wake row presented to you (1)" in client.error(
        "wake_ack", {"through": 2, "generation": gen})
    acked = client.ok("wake_ack", {"through": 1, "generation": gen})
    assert acked["consumed"] == 1 and acked["remaining"] == 1 and acked["retired"] is False
    assert claims(fm_home) == {2: None}  # the row nobody saw waits for the next drain
    assert [r["seq"] for r in client.ok("wake_drain")["rows"]] == [2]


def test_a_stale_presentation_consumes_what_it_showed_and_names_the_newer_episode(
        fm_home: Home, connect: Connect) -> None:
    client = connect(dict(os.environ))
    fm(fm_home, "wake", "append", "signal", "a", "first")
    old = client.ok("wake_drain")["ack"]
    # A watcher start announced the episode; a row appended over it opens a new generation,
    # and the next drain names that one.
    set_episode(fm_home, "announced", "downtime", old["generation"])
    fm(fm_home, "wake", "append", "signal", "b", "second")
    new = client.ok("wake_drain")["ack"]
    assert new["through"] == 2 and new["generation"] != old["generation"]
    stale = client.ok("wake_ack", old)
    assert (stale["consumed"], stale["retired"], stale["moved"]) == (1, False, True)
    assert stale["confirmation"] is None and stale["notices"] == [
        "wake drain: acknowledged wakes through 1 (1 row(s) consumed), but a newer recovery "
        "episode is pending; re-run fm wake drain and use the new WAKE_ACK_REQUIRED command"]
    assert claims(fm_home) == {2: "main"}
    done = client.ok("wake_ack", new)
    assert (done["consumed"], done["retired"]) == (1, True)
    assert query(fm_home)["episode"] == f"acked:handling:{new['generation']}"


def test_a_generation_no_drain_printed_consumes_the_rows_and_retires_nothing(
        fm_home: Home, connect: Connect) -> None:
    client = connect(dict(os.environ))
    fm(fm_home, "wake", "append", "signal", "a", "x")
    gen = client.ok("wake_drain")["generation"]
    acked = client.ok("wake_ack", {"through": 1, "generation": "made.up.1"})
    assert (acked["consumed"], acked["retired"]) == (1, False)
    assert acked["notices"] == [
        "wake drain: acknowledged wakes through 1 (1 row(s) consumed), but recovery generation "
        f"made.up.1 was never printed by a drain (the current episode is pending:handling:{gen}), "
        "so the episode stays open: re-run fm wake drain and use the WAKE_ACK_REQUIRED command "
        "it prints"]
    episode_only = client.ok("wake_drain")
    assert episode_only["ack"] == {"through": 0, "generation": gen}
    assert episode_only["explain"][0].startswith("NOTHING NEW: ")
    assert client.ok("wake_ack", episode_only["ack"])["retired"] is True


def test_another_actors_rows_are_never_taken(fm_home: Home, connect: Connect) -> None:
    for key in ("a", "b"):
        fm(fm_home, "wake", "append", "signal", key, key)
    owner = live_owner(fm_home)
    try:
        assert fm(fm_home, "wake", "grant", "activate", str(owner.pid), "br.1.g").returncode == 0
        assert fm(fm_home, "wake", "grant", "publish", "br.1.g", "1", "2").returncode == 0
        gen = str(query(fm_home)["episode"]).split(":")[2]
        client = connect(dict(os.environ))
        held = client.ok("wake_drain")
        assert held["rows"] == [] and held["ack"] is None
        assert held["held"].startswith("WAKE ROWS HELD BY SUPERVISION BRANCH: 2 queued row(s)")
        refused = client.error("wake_ack", {"through": 2, "generation": gen})
        assert "beyond the last wake row presented to you (none)" in refused
        assert claims(fm_home) == {1: "branch", 2: "branch"}
        # The branch's own session (FM_SUPERVISION_ACTOR=branch) drains and acknowledges its
        # rows through the tools, as fm wake drain does there.
        branch = connect({**os.environ, "FM_SUPERVISION_ACTOR": "branch"})
        drained = branch.ok("wake_drain")
        assert drained["actor"] == "branch" and [r["seq"] for r in drained["rows"]] == [1, 2]
        assert drained["ack_command"].endswith(f"--recovery-generation {drained['generation']}")
        # Main's tools still cannot consume them; the branch's acknowledgement does.
        assert "(exit 2 USAGE)" in client.error("wake_ack", drained["ack"])
        assert branch.ok("wake_ack", drained["ack"])["consumed"] == 2
        assert claims(fm_home) == {}
    finally:
        finish(owner)


def test_an_unknown_actor_in_the_environment_is_the_commands_error(fm_home: Home,
                                                                  connect: Connect) -> None:
    client = connect({**os.environ, "FM_SUPERVISION_ACTOR": "captain"})
    line = "fm: unknown FM_SUPERVISION_ACTOR 'captain' (expected main or branch) (exit 2 USAGE)"
    assert client.error("wake_drain") == line
    assert client.error("wake_ack", {"through": 0, "generation": "g.1"}) == line
    assert client.ok("crew_list") == {"crews": []}  # looking needs no actor


@pytest.mark.parametrize(("args", "needle"), [
    ({"through": 2 ** 63, "generation": "g"}, "wake drain: invalid acknowledgement sequence"),
    ({"through": 1, "generation": ""}, "acknowledgement requires its recovery generation"),
    ({"through": 1, "generation": "bad gen"}, "wake drain: invalid recovery generation"),
    ({"through": -1, "generation": "g"}, "wake_ack: argument 'through' must be 0 or more"),
    ({"through": "1", "generation": "g"}, "argument 'through' must be a whole number"),
    ({"generation": "g"}, "wake_ack: missing argument 'through'"),
    ({"through": 1, "generation": "g", "actor": "branch"}, "unknown argument 'actor'"),
])
def test_bad_acknowledgement_arguments_are_one_line_and_consume_nothing(
        fm_home: Home, connect: Connect, args: dict[str, object], needle: str) -> None:
    fm(fm_home, "wake", "append", "signal", "a", "x")
    client = connect(dict(os.environ))
    client.ok("wake_drain")
    line = client.error("wake_ack", args)
    assert needle in line and line.endswith("(exit 2 USAGE)"), line
    assert claims(fm_home) == {1: "main"}


@pytest.mark.parametrize("marker", ["FM_CREW", "FM_TASK_ID"])
def test_a_crews_session_never_gets_the_server(fm_home: Home, marker: str) -> None:
    fm(fm_home, "wake", "append", "signal", "a", "x")
    env = {**os.environ, marker: "w1"}
    done = subprocess.run([sys.executable, "-m", "firstmate", "mcp"], env=env, input="",
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"fm: mcp: refusing to run in a crew's session ({marker}=w1): only the captain acts on "
        "the wake queue and the crews through MCP tools; report with fm crew status\n")
    assert claims(fm_home) == {1: None}
