"""The opt-in app-server mode: install text, arguments, and the JSON-RPC client against a
stand-in ``codex app-server`` (the real one runs in tests/e2e/test_codex_e2e.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from firstmate.api import InstallOptions, UsageError
from firstmate.testing import DEADLINE, fm_command
from firstmate_plugin_codex import appserver
from firstmate_plugin_codex.hooks import plugin

FAKE = r'''
import json, os, sys, threading, time
log = open(os.environ["FAKE_LOG"], "a")
def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n"); sys.stdout.flush()
def finish_turn():
    time.sleep(0.3)
    log.write(json.dumps({"event": "completed"}) + "\n"); log.flush()
    send({"method": "turn/completed", "params": {}})
for line in sys.stdin:
    msg = json.loads(line)
    log.write(json.dumps({"event": "got", "msg": msg}) + "\n"); log.flush()
    method, ident = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"id": ident, "result": {"userAgent": "fake"}})
    elif method in ("thread/start", "thread/resume"):
        send({"id": ident, "result": {"thread": {"id": msg["params"].get("threadId", "th-1")}}})
    elif method == "turn/start":
        send({"id": ident, "result": {"turn": {"id": "t"}}})
        send({"method": "turn/started", "params": {}})
        threading.Thread(target=finish_turn).start()
    elif ident is not None:
        send({"id": ident, "error": {"code": 1, "message": "nope"}})
'''


def fake_server(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    script = tmp_path / "fake_app_server.py"
    script.write_text(FAKE)
    return [sys.executable, str(script)], {**os.environ, "FAKE_LOG": str(tmp_path / "log.jsonl")}


def events(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_turns_go_into_the_thread_one_after_another(tmp_path: Path) -> None:
    command, env = fake_server(tmp_path)
    log = Path(env["FAKE_LOG"])
    client = appserver.AppServerClient.spawn(command, str(tmp_path), env)
    try:
        assert client.open(str(tmp_path), None) == "th-1"
        client.start_turn("first")
        client.start_turn("second")  # waits for the first turn to complete
        client.start_turn("third")
    finally:
        client.close()
    seen = events(log)
    order = [e["msg"]["params"]["input"][0]["text"] if e["event"] == "got"  # type: ignore[index]
             and e["msg"].get("method") == "turn/start" else e["event"]  # type: ignore[union-attr]
             for e in seen if e["event"] == "completed" or (
                 e["event"] == "got" and e["msg"].get("method") == "turn/start")]  # type: ignore[union-attr]
    assert order[:5] == ["first", "completed", "second", "completed", "third"]
    starts = [e["msg"] for e in seen if e["event"] == "got"
              and e["msg"].get("method") == "turn/start"]  # type: ignore[union-attr]
    assert all(m["params"]["threadId"] == "th-1" for m in starts)  # type: ignore[index]
    assert client.turns_started == 3


def test_a_dead_app_server_is_a_failed_delivery(tmp_path: Path) -> None:
    client = appserver.AppServerClient.spawn([sys.executable, "-c", "pass"], str(tmp_path), {})
    assert client.wait_closed(30)
    appserver.CLIENTS[4242] = client
    try:
        delivered, detail = appserver.deliver("wake", 4242) or (None, "")
        assert delivered is False and "exited" in detail
    finally:
        appserver.CLIENTS.pop(4242)
    assert appserver.deliver("wake", 4242) is None


def test_arguments() -> None:
    assert appserver._args(["--cwd", "/x", "--prompt=hi"]) == {"cwd": "/x", "prompt": "hi"}
    for bad in (["--nope"], ["--cwd"], ["--thread="]):
        with pytest.raises(UsageError):
            appserver._args(bad)


def test_install_app_server_mode(tmp_path: Path) -> None:
    result = plugin.firstmate_install(options=InstallOptions("codex", tmp_path,
                                                             flags={"app-server": "true"}))
    assert result is not None and any("fm codex-serve" in note for note in result.notes)
    agents = (tmp_path / "AGENTS.md").read_text()
    assert "codex-serve" in agents and "fm checkpoint --seconds" not in agents
    with pytest.raises(UsageError):
        plugin.firstmate_install(options=InstallOptions(
            "codex", tmp_path, flags={"app-server": "true", "parked": "true"}))


def test_the_plugin_contributes_the_command() -> None:
    registry: dict[str, object] = {}
    plugin.firstmate_cli_commands(registry=registry)
    assert registry["codex-serve"] is appserver.main


FAKE_PROBE = r'''
import json, os, subprocess, sys
log = open(os.environ["FAKE_LOG"], "a")
def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    method, ident = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"id": ident, "result": {"userAgent": "fake"}})
    elif method in ("thread/start", "thread/resume"):
        send({"id": ident, "result": {"thread": {"id": "th-1"}}})
    elif method == "turn/start":
        # What the first turn's own hooks would see when it starts.
        status = subprocess.run([sys.executable, "-m", "firstmate", "status", "--json"],
                                capture_output=True, text=True)
        log.write(json.dumps({"watcher": json.loads(status.stdout)["watcher"],
                              "owner": os.environ.get("FM_REARM_OWNER")}) + "\n"); log.flush()
        send({"id": ident, "result": {"turn": {"id": "t"}}})
        send({"method": "turn/started", "params": {}})
        send({"method": "turn/completed", "params": {}})
    elif ident is not None:
        send({"id": ident, "error": {"code": 1, "message": "nope"}})
'''


def test_the_first_turn_starts_only_once_a_watcher_is_confirmed(tmp_path: Path) -> None:
    import subprocess

    from firstmate.testing import read_line

    script = tmp_path / "fake_probe.py"
    script.write_text(FAKE_PROBE)
    log = tmp_path / "log.jsonl"
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(FM_HOME=str(home), FAKE_LOG=str(log), FM_TMUX="/nonexistent/tmux",
               FM_SIGNAL_GRACE="0")
    added = subprocess.run([sys.executable, "-m", "firstmate", "crew", "add", "c1", "--pane", "%1"],
                           env=env, capture_output=True, text=True, timeout=60, check=False)
    assert added.returncode == 0, added.stderr
    serve = subprocess.Popen(
        [sys.executable, "-m", "firstmate", "codex-serve", "--cwd", str(tmp_path), "--prompt",
         "hello", "--codex", f"{sys.executable} {script}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        assert read_line(serve) == "codex-serve: thread th-1"
        deadline = 60.0
        import time

        end = time.monotonic() + deadline
        while not (log.exists() and log.read_text().strip()):
            assert time.monotonic() < end, "the first turn never started"
            time.sleep(0.05)
        seen = json.loads(log.read_text().splitlines()[0])
        assert seen["watcher"]["healthy"] is True, seen  # successor first
        assert seen["owner"] == f"fm codex-serve (pid {serve.pid})"
    finally:
        serve.terminate()
        serve.wait(60)
        subprocess.run([sys.executable, "-m", "firstmate", "arm", "--stop"], env=env,
                       capture_output=True, timeout=60, check=False)


def test_fm_help_lists_codex_serve_and_shows_its_options(tmp_path: Path) -> None:
    env = {**os.environ, "FM_HOME": str(tmp_path / "home")}

    def fm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(fm_command(*args), capture_output=True, text=True, env=env,
                              timeout=DEADLINE, check=False)

    listing = fm("help")
    assert listing.returncode == 0
    assert re.search(r"^plugin commands:\n  codex-serve +wake an idle Codex thread through codex "
                     r"app-server \(opt-in mode\)$", listing.stdout, re.M), listing.stdout
    helped = fm("codex-serve", "--help")
    assert (helped.returncode, helped.stderr) == (0, "")
    assert helped.stdout.startswith("usage: fm codex-serve [-h] [--cwd DIR] [--thread ID]")
    for option in ("--cwd", "--thread", "--prompt", "--codex"):
        assert option in helped.stdout
    assert fm("help", "codex-serve").stdout == helped.stdout
    bad = fm("codex-serve", "--nope")
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr == ("fm: codex-serve: unrecognized arguments: --nope; "
                          "run 'fm codex-serve --help'\n")
