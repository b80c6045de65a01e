"""A crew's session (``FM_CREW`` / ``FM_TASK_ID``) never consumes what belongs to the primary.

Crews inherit the captain's ``FM_HOME`` and read the project they work in, the primary's
protocols included: whatever those tell a crew's model, its ``fm wake drain`` must not present
and claim the primary's rows, its acknowledgement must not delete them, and no other command may
take the primary's session lock, decisions, away mode or host. Each is refused in one line with
exit 1, changing nothing; reporting (``fm crew status``, ``fm wake append``) and looking
(``fm wake query``, ``fm status``) still work.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from firstmate.base.errors import FirstmateError
from firstmate.base.exitcodes import ExitCode
from firstmate.cli.main import CAPTAIN_ONLY
from firstmate.fast import drainpath
from firstmate.store import crew
from firstmate.store import drain as store_drain
from firstmate.store.database import open_store
from firstmate.store.home import Home
from wakeq_support import claims, fm

REFUSED = re.compile(r"^fm: [a-z ]+: refusing to run in a crew's session \((FM_CREW|FM_TASK_ID)=\w+\): "
                     r"only the captain [^;\n]+; report with fm crew status\n$")


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home").ensure()
    crew.add(h, "cA", "%1")
    crew.add(h, "beta", "%2")
    crew.append_status(h, "beta", "needs-decision: key=x choose A or B")
    for n in (1, 2):
        assert fm(h, "wake", "append", "signal", f"k{n}", f"signal: row {n}").returncode == 0
    return h


def _refused(proc_stderr: str, returncode: int) -> None:
    assert returncode == ExitCode.FAILED, proc_stderr
    assert REFUSED.match(proc_stderr), proc_stderr


@pytest.mark.parametrize("variable", ["FM_CREW", "FM_TASK_ID"])
def test_a_crews_drain_is_refused_and_the_primary_still_gets_its_rows(home: Home,
                                                                     variable: str) -> None:
    done = fm(home, "wake", "drain", **{variable: "cA"})
    _refused(done.stderr, done.returncode)
    assert done.stdout == ""
    assert set(claims(home).values()) == {None}  # nothing claimed
    mine = fm(home, "wake", "drain")
    assert mine.returncode == 0
    assert "signal: row 1" in mine.stdout and "signal: row 2" in mine.stdout
    assert "beta needs-decision: key=x choose A or B" in mine.stdout


def test_a_crews_acknowledgement_consumes_nothing(home: Home) -> None:
    mine = fm(home, "wake", "drain")
    command = re.search(r"run fm wake drain (--ack-through .*)$", mine.stderr, re.M)
    assert command is not None, mine.stderr
    args = command.group(1).split()
    for extra in ([], ["--json"], ["--actor", "main"]):
        done = fm(home, "wake", "drain", *args, *extra, FM_CREW="cA")
        _refused(done.stderr, done.returncode)
        assert done.stdout == ""
        assert len(claims(home)) == 2  # both rows still there
    assert fm(home, "wake", "drain", *args).returncode == 0
    assert claims(home) == {}


@pytest.mark.parametrize("args", [
    ["wake", "drain", "--json"],
    ["wake", "drain", "--actor", "branch"],
    ["wake", "grant", "withhold"],
    ["wake", "grant", "release", "g1"],
    ["lock", "acquire"],
    ["lock", "release"],
    ["crew", "answer", "beta", "--key", "x", "A"],
    ["away", "on"],
    ["away", "off"],
    ["host", "park"],
    ["host", "enable"],
    ["host", "disable"],
    ["host", "report", "handled it"],
    ["migrate", "--from-legacy", "/nonexistent"],
    ["mcp"],
])
def test_every_command_that_takes_the_primarys_state_is_refused(home: Home,
                                                                 args: list[str]) -> None:
    done = fm(home, *args, FM_CREW="cA")
    _refused(done.stderr, done.returncode)
    assert set(claims(home).values()) == {None}
    assert [d.key for d in crew.open_decisions(home, "beta")] == ["x"]
    assert not (home.state / "away").exists()
    assert not (home.state / "session.lock").exists()


def test_the_refused_commands_are_the_table_the_cli_checks() -> None:
    # (the parametrised test above covers every entry of the table)
    assert {name: set(subs) for name, subs in CAPTAIN_ONLY.items()} == {
        "wake": {"drain", "grant"}, "lock": {"acquire", "release"}, "crew": {"answer"},
        "away": {"on", "off"}, "host": {"park", "report", "enable", "disable"},
        "migrate": {"*"}, "mcp": {"*"}}


@pytest.mark.parametrize("args", [
    ["crew", "status", "cA", "done: my part"],
    ["crew", "turn-ended", "cA"],
    ["wake", "append", "signal", "k3", "signal: from a crew"],
    ["wake", "query"],
    ["status"],
    ["crew", "list"],
    ["lock", "status"],
    ["away", "status"],
    ["wake", "drain", "--help"],
])
def test_a_crew_still_reports_and_looks(home: Home, args: list[str]) -> None:
    done = fm(home, *args, FM_CREW="cA", FM_TMUX_SOCKET=str(home.root / "no-tmux"))
    assert done.returncode == 0, done.stderr
    assert "refusing" not in done.stderr


def test_both_drain_paths_refuse_a_crew_in_process(home: Home) -> None:
    env = {"FM_HOME": str(home.root), "FM_CREW": "cA"}
    out, err = io.StringIO(), io.StringIO()
    for call in (lambda: drainpath.drain(env, out, err),
                 lambda: drainpath.acknowledge(env, 2, "g", out, err)):
        with pytest.raises(FirstmateError) as caught:
            call()
        assert caught.value.exit_code == ExitCode.FAILED
        assert "crew's session (FM_CREW=cA)" in caught.value.message
    assert out.getvalue() == err.getvalue() == ""
    db = open_store(home)
    try:
        with pytest.raises(FirstmateError, match="crew's session"):
            store_drain.drain(db, env=env)
        with pytest.raises(FirstmateError, match="crew's session"):
            store_drain.acknowledge(db, None, 2, "g1", env=env)
    finally:
        db.close()
    assert set(claims(home).values()) == {None}


@pytest.mark.parametrize("args", [["arm"], ["watch"], ["checkpoint", "--seconds", "1"]])
def test_the_watchers_own_commands_refuse_with_their_failed_line(home: Home,
                                                                 args: list[str]) -> None:
    done = fm(home, *args, FM_CREW="cA", FIRSTMATE_PLUGINS="none")
    assert done.returncode == ExitCode.FAILED, done.stderr
    assert re.fullmatch(r"watcher: FAILED - refusing to (arm|run) in a crew's session "
                        r"\(FM_CREW=cA\): [^\n]+\n", done.stdout), done.stdout
    assert set(claims(home).values()) == {None}


def test_a_bridge_in_a_crews_session_never_takes_the_session_lock(home: Home,
                                                                  tmp_path: Path) -> None:
    """The primary's in-process shim, loaded by a crew's harness from a shared directory, asks
    its bridge to arm: the bridge stands aside and the primary's session lock stays free."""
    import json
    import os
    import subprocess
    import sys

    from wakeq_support import CORE, child_env
    from watch_support import bridge_plugin

    bridge_plugin(tmp_path, "bridgepi", retire=False, idle=False)
    lines = [{"type": "hello", "id": "1", "protocol": 1, "harness": "bridgepi", "shim": "0",
              "pid": os.getpid(), "cwd": str(home.root), "argv": ["pi"], "restart": False},
             {"type": "arm", "id": "2"}]
    env = child_env(home, FM_CREW="cA", FM_SESSION_HOLDER_PID=str(os.getpid()),
                    FM_TMUX=str(home.root / "no-tmux"))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), CORE])  # the stand-in plugin
    done = subprocess.run([sys.executable, "-m", "firstmate", "bridge", "bridgepi"],
                          input="".join(json.dumps(line) + "\n" for line in lines),
                          capture_output=True, text=True, timeout=60, check=False, env=env)
    replies = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    (arm,) = [reply for reply in replies if reply.get("id") == "2"]
    assert arm["ok"] is False and "crew's session" in arm["text"], replies
    assert not (home.state / "session.lock").exists()
    assert fm(home, "lock", "status").stdout == "lock: free\n"
