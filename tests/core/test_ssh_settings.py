"""A fleet host's SSH settings and a crew's ``host`` line: how they are written, read, checked
and authenticated, and the ssh command lines made from them (no ssh runs here)."""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from pathlib import Path

import pytest
from firstmate.base.errors import StateError, UsageError
from firstmate.fast import crewlog
from firstmate.fleet import config, sshhosts
from firstmate.fleet.config import Auth, HostEntry, Primary
from firstmate.store import crew
from firstmate.store.home import Home


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"FIRSTMATE_KEYS_DIR": str(tmp_path / "keys"), "FM_SSH": "/usr/bin/ssh"}


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "h").ensure()


def primary_with(home: Home, env: dict[str, str], access: sshhosts.SshHost) -> None:
    root = os.fspath(home.root)
    entry = HostEntry(access.host, "00" * 32, Auth.fresh("u"), sshhosts.sealed(root, env, access))
    config.save_primary(root, env, Primary("f1", "use", ("nats://127.0.0.1:1",),
                                           Auth.fresh("relay"), hosts=(entry,)))


# --- the registration ---------------------------------------------------------------------------


def test_a_hosts_crew_is_registered_with_a_host_line(home: Home) -> None:
    crew.add(home, "gpu.a", "%3", pid=42, started=7, host="gpu", label="s:w.0")
    assert crew.path(home, "gpu.a", crew.PANE).read_text() == \
        "%3\nhost gpu\nlabel s:w.0\npid 42 7\n"
    member = crew.get(home, "gpu.a")
    assert (member.pane, member.host, member.pid, member.started) == ("%3", "gpu", 42, 7)
    assert member.shown == "gpu:%3 [s:w.0]"
    assert crew.get(home, "gpu.a") == crew.list(home)[0]


def test_a_registration_of_the_older_format_still_reads_as_a_hosts_pane(home: Home) -> None:
    crew.add(home, "gpu.a", "%3")
    crew.path(home, "gpu.a", crew.PANE).write_text("fleet://gpu/%41\n")
    member = crew.get(home, "gpu.a")
    assert (member.pane, member.host, member.bound) == ("%41", "gpu", True)
    crew.path(home, "gpu.a", crew.PANE).write_text("fleet://gpu/\n")
    assert (crew.get(home, "gpu.a").pane, crew.get(home, "gpu.a").host) == ("-", "gpu")


def test_a_local_registration_has_no_host_line(home: Home) -> None:
    crew.add(home, "a", "%3", pid=42, started=7)
    assert "host" not in crew.path(home, "a", crew.PANE).read_text()
    assert crew.get(home, "a").host is None
    assert crewlog.parse_registration("%3\npid 42 7\n") == ("%3", None, 42, 7, None)


def test_a_crew_moves_to_a_host_only_with_replace(home: Home) -> None:
    crew.add(home, "gpu.a", "%3")
    with pytest.raises(Exception, match="--replace"):
        crew.add(home, "gpu.a", "%3", host="gpu")
    crew.add(home, "gpu.a", "%3", host="gpu", replace=True)
    assert crew.get(home, "gpu.a").host == "gpu"
    with pytest.raises(UsageError, match="invalid host name"):
        crew.add(home, "x", "%3", host="gpu;rm")


# --- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dest", ["-oProxyCommand=touch /tmp/x", "a b", "me@host;id", "",
                                  "me@-host", "host\n", "$(id)@h"])
def test_a_destination_that_is_not_an_address_is_refused(dest: str) -> None:
    with pytest.raises(UsageError, match="invalid --ssh"):
        sshhosts.settings("gpu", dest)


def test_settings_are_checked_one_by_one(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="invalid --port"):
        sshhosts.settings("gpu", "h", port=70000)
    with pytest.raises(UsageError, match=r"--identity .* is not a file"):
        sshhosts.settings("gpu", "h", identity=str(tmp_path / "none"))
    with pytest.raises(UsageError, match="invalid --remote-fm"):
        sshhosts.settings("gpu", "h", fm="'unclosed")
    with pytest.raises(UsageError, match="invalid host name"):
        sshhosts.settings("g.pu", "h")
    access = sshhosts.settings("gpu", "me@10.0.0.7", port=2222, directory="/srv/p q",
                               fm="/opt/fm bin/fm", socket="crews")
    assert access.shown == "me@10.0.0.7 port 2222"
    assert access.tmux_argv() == ["tmux", "-u", "-L", "crews"]
    assert access.fm_words("crew", "list") == ["env", "FM_TMUX_SOCKET=crews", "/opt/fm",
                                               "bin/fm", "crew", "list"]


def test_settings_round_trip_through_the_fleet_configuration(home: Home, env: dict[str, str],
                                                             tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("k")
    access = sshhosts.settings("gpu", "me@h", port=22, identity=str(key), directory="/p",
                               fm="fm", tmux="/usr/bin/tmux", socket="/s/t")
    primary_with(home, env, access)
    assert sshhosts.load(home, env, "gpu") == access
    assert sshhosts.load(home, env, "cpu") is None
    with pytest.raises(sshhosts.NoAccess, match="fm fleet host add cpu --ssh"):
        sshhosts.require(home, env, "cpu")


@pytest.mark.parametrize("field,value", [("dest", "evil@h"), ("fm", "touch /tmp/owned; fm"),
                                         ("port", 2200), ("mac", "00" * 32)])
def test_settings_fm_did_not_write_are_never_used(home: Home, env: dict[str, str],
                                                  field: str, value: object) -> None:
    primary_with(home, env, sshhosts.settings("gpu", "me@h"))
    path = os.path.join(config.fleet_dir(os.fspath(home.root), env), config.PRIMARY)
    data = json.loads(Path(path).read_text())
    data["hosts"]["gpu"]["ssh"][field] = value
    config.write_private(path, data)
    with pytest.raises(StateError, match="not authenticated") as caught:
        sshhosts.load(home, env, "gpu")
    assert caught.value.exit_code == 4
    assert sshhosts.every(home, env) == []


def test_settings_sealed_for_another_home_do_not_verify_here(tmp_path: Path,
                                                             env: dict[str, str]) -> None:
    first, second = Home(tmp_path / "a").ensure(), Home(tmp_path / "b").ensure()
    block = sshhosts.sealed(os.fspath(first.root), env, sshhosts.settings("gpu", "me@h"))
    with pytest.raises(StateError, match="not authenticated"):
        sshhosts.opened(os.fspath(second.root), env, "gpu", block)


# --- the ssh command -----------------------------------------------------------------------------


def test_every_ssh_shares_one_strict_control_connection(home: Home, env: dict[str, str],
                                                        tmp_path: Path) -> None:
    key = tmp_path / "k%h"
    key.write_text("k")
    access = sshhosts.settings("gpu", "me@h", port=2222, identity=str(key), directory="/p'q")
    argv = sshhosts.argv_for(home, env, access, ["tmux", "send-keys", "-l", "--", "a'b $(x);"])
    options = dict(zip(argv[1::2], argv[2::2], strict=False))
    text = " ".join(argv)
    assert argv[0] == "/usr/bin/ssh"
    assert "ControlMaster=auto" in text and "BatchMode=yes" in text
    assert "StrictHostKeyChecking=yes" in text and "ControlPersist=600" in text
    control = next(a for a in argv if a.startswith("ControlPath="))
    assert control == f'ControlPath="{sshhosts.control_path(home, access)}"'
    assert len(sshhosts.control_path(home, access)) <= sshhosts.MAX_CONTROL_PATH
    assert options["-i"] == str(key).replace("%", "%%")
    assert argv[-3:-1] == ["--", "me@h"]
    assert shlex.split(argv[-1]) == ["cd", "/p'q", "&&", "tmux", "send-keys", "-l", "--",
                                     "a'b $(x);"]
    new = sshhosts.argv_for(home, env, access, ["true"], accept_new=True)
    assert "StrictHostKeyChecking=accept-new" in " ".join(new)


def test_a_home_too_deep_for_a_socket_path_keeps_its_sockets_in_a_private_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    short = Home(Path(tempfile.gettempdir()) / f"fm-ssh-test-{os.getpid()}").ensure()
    try:
        path = sshhosts.control_path(short, sshhosts.settings("gpu", "h"))
        assert path.startswith(os.path.join(short.state, "fleet", "ssh") + "/gpu-")
    finally:
        import shutil

        shutil.rmtree(short.root)
    deep = Home(tmp_path / ("d" * 60) / "x%y z").ensure()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / ("r" * 80)))  # (too deep as well)
    path = sshhosts.control_path(deep, sshhosts.settings("gpu", "h"))
    assert path.startswith(os.path.join(tempfile.gettempdir(), f"fm-ssh-{os.geteuid()}") + "/")
    assert len(path) <= sshhosts.MAX_CONTROL_PATH and "%" not in path
    assert os.stat(os.path.dirname(path)).st_mode & 0o077 == 0


# --- hostile host names on the command line ---------------------------------------------------


@pytest.mark.parametrize("host", ["../x", "-oProxyCommand=touch OWNED", ";touch OWNED", "a\nb",
                                  "$(touch OWNED)", "g.pu", ""])
def test_a_host_name_that_is_not_one_is_refused_before_ssh_runs(tmp_path: Path,
                                                                host: str) -> None:
    import subprocess
    import sys

    owned = tmp_path / "OWNED"
    ran = tmp_path / "ssh-ran"
    fake_ssh = tmp_path / "ssh"
    fake_ssh.write_text(f"#!/bin/sh\ntouch {shlex.quote(str(ran))}\nexit 255\n")
    fake_ssh.chmod(0o755)
    env = {**os.environ, "FM_HOME": str(tmp_path / "h"), "FM_SSH": str(fake_ssh),
           "FIRSTMATE_KEYS_DIR": str(tmp_path / "keys")}
    host = host.replace("OWNED", str(owned))
    for args in (["crew", "add", "x", f"--host={host}", "--pane", "%1"],
                 ["crew", "spawn", "x", f"--host={host}", "--harness", "fakecrew"]):
        done = subprocess.run([sys.executable, "-m", "firstmate", *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, (args, done.stderr)
        assert "invalid host name" in done.stderr and "Traceback" not in done.stderr
    assert not owned.exists() and not ran.exists()
