"""A fleet host's panes, read and typed into through ssh: the SSH crew backend, the hosts source
of the watcher and the crew commands, against a real tmux server on a private socket standing
for the host's, reached through a stand-in ``ssh`` (FM_SSH) that runs the remote command with
``sh -c`` here, logs it, and fails as ssh does (exit 255) while told the host is down. The
tests/fleet suite does the same through a real sshd."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from firstmate.app import crewlook, crewops
from firstmate.app.top import Gatherer
from firstmate.base.errors import FirstmateError
from firstmate.fleet import config, sshhosts
from firstmate.fleet.config import Auth, HostEntry, Primary
from firstmate.store import crew
from firstmate.store.crewscan import FleetScan
from firstmate.store.home import Home
from firstmate.testing.procs import eventually
from firstmate.watch.backends import screen
from firstmate.watch.backends.hosts import UNREACHABLE, CrewPanes
from firstmate.watch.backends.panes import start_ticks
from firstmate.watch.sources.base import PollContext
from firstmate.watch.sources.hosts import HostsSource, mark_path

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None,
                                reason="the tmux binary is not installed: crews run in tmux")

T0 = 1_700_000_000.0
FAKE_SSH = """#!{python}
import json, os, sys
args, i, control = sys.argv[1:], 0, False
while i < len(args) and args[i] != "--":
    control = control or args[i] == "-O"
    i += 2 if args[i] in ("-o", "-p", "-i", "-F", "-O", "-l") else 1
if control:
    sys.exit(255)
if os.path.exists(os.environ["FAKE_SSH_DOWN"]):
    sys.stderr.write("ssh: connect to host h port 22: Connection refused\\n")
    sys.exit(255)
with open(os.environ["FAKE_SSH_LOG"], "a") as fh:
    fh.write(json.dumps(args[i + 2]) + "\\n")
os.execvp("sh", ["sh", "-c", args[i + 2]])
"""


@attrs.define
class Host:
    tmp: Path
    home: Home
    env: dict[str, str]
    socket: str

    @property
    def down(self) -> Path:
        return Path(self.env["FAKE_SSH_DOWN"])

    def calls(self) -> list[str]:
        log = Path(self.env["FAKE_SSH_LOG"])
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True,
                              text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def pane(self, name: str, program: str = "exec cat") -> str:
        """A pane on the host (its id) with crew *name* of host gpu registered to it, bound to
        its program as the host's fm binds it."""
        if subprocess.run(["tmux", "-S", self.socket, "has-session"], capture_output=True,
                          timeout=30).returncode:
            pane = self.tmux("new-session", "-d", "-s", "s", "-x", "100", "-y", "20", "-P",
                             "-F", "#{pane_id}", "sh", "-c", program).strip()
        else:
            pane = self.tmux("new-window", "-d", "-t", "s:", "-P", "-F", "#{pane_id}", "sh",
                             "-c", program).strip()
        pid = int(self.tmux("display-message", "-p", "-t", pane, "#{pane_pid}"))
        crew.add(self.home, f"gpu.{name}", pane, pid=pid, started=start_ticks(pid), host="gpu")
        return pane

    def ctx(self, triage: list[str], now: float = T0) -> PollContext:
        return PollContext(home=self.home, env=self.env, now=now, poll=1, triage=triage.append)


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    ssh = tmp_path / "ssh"
    ssh.write_text(FAKE_SSH.replace("{python}", sys.executable))
    ssh.chmod(0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(FIRSTMATE_KEYS_DIR=str(tmp_path / "keys"), FM_SSH=str(ssh),
               FAKE_SSH_LOG=str(tmp_path / "ssh.log"), FAKE_SSH_DOWN=str(tmp_path / "down"),
               FM_TMUX_SOCKET=str(tmp_path / "local.sock"), FM_SSH_RETRY="0",
               FM_POLL="0.000001", FM_STALE_SLICE_MS="600000")
    home = Home(tmp_path / "primary").ensure()
    socket = str(tmp_path / "gpu.sock")
    access = sshhosts.settings("gpu", "me@gpu.example", socket=socket)
    root = os.fspath(home.root)
    entry = HostEntry("gpu", "00" * 32, Auth.fresh("u"), sshhosts.sealed(root, env, access))
    config.save_primary(root, env, Primary("f1", "use", ("nats://127.0.0.1:1",),
                                           Auth.fresh("relay"), hosts=(entry,)))
    made = Host(tmp_path, home, env, socket)
    try:
        yield made
    finally:
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True, timeout=30)


def panes(host: Host) -> CrewPanes:
    return CrewPanes.from_env(host.home, host.env)


# --- the backend and the crew commands ------------------------------------------------------------


def test_text_typed_into_a_hosts_pane_arrives_exactly(host: Host) -> None:
    record = host.tmp / "typed"
    host.pane("a", f"exec cat > {record}")
    hostile = "a'b \"c\" $(touch {m}) `touch {m}`; #{{pane_id}} \\; end;".format(
        m=host.tmp / "owned")
    done = crewops.steer(host.home, panes(host), "gpu.a", hostile)
    assert done.pane == crew.get(host.home, "gpu.a").pane
    eventually("the line typed on the host", lambda: record.exists() and record.read_text())
    assert record.read_text() == hostile + "\n"
    assert not (host.tmp / "owned").exists()
    assert host.calls(), "every tmux call went through ssh"


def test_a_hosts_pane_is_judged_by_the_program_and_start_time_read_there(host: Host) -> None:
    pane = host.pane("a")
    member = crew.get(host.home, "gpu.a")
    crew.add(host.home, "gpu.a", pane, pid=member.pid, started=(member.started or 0) + 1,
             host="gpu", replace=True)
    with pytest.raises(FirstmateError, match=r"gpu:%\d+ now runs another program .*restarted"):
        crewops.steer(host.home, panes(host), "gpu.a", "go on")
    crew.add(host.home, "gpu.a", pane, pid=member.pid, started=member.started, host="gpu",
             replace=True)
    shown = crewlook.peek(host.home, panes(host), "gpu.a", 5)
    assert shown.read and shown.state == "live"


def test_a_hosts_crew_screen_is_read_through_its_hosts_backend(host: Host) -> None:
    pane = host.pane("a", "printf 'line one\\nline two\\n'; exec cat")
    eventually("the pane's text", lambda: "line two" in host.tmux("capture-pane", "-p", "-t",
                                                                  pane))
    member = crew.get(host.home, "gpu.a")
    shown = screen.tail(panes(host).of(member), member, 5)
    assert (shown.state, shown.lines) == ("live", ("line one", "line two"))
    here = screen.tail(panes(host).local, member, 5)  # (this machine's tmux: never asked)
    assert (here.state, here.lines) == ("unknown", ()) and "on host gpu" in here.why


def test_attaching_to_a_hosts_pane_runs_ssh_with_a_terminal(host: Host) -> None:
    pane = host.pane("a")
    plan = crewlook.attach(host.home, panes(host), "gpu.a", {"TMUX": "/tmp/x,1,0"},
                           terminal=True)
    assert plan.host == "gpu" and plan.how == crewlook.NESTED
    assert plan.argv[0] == host.env["FM_SSH"] and "-t" in plan.argv
    assert plan.argv[-1].endswith(f"attach-session -t {pane}")
    assert any("host gpu's tmux over ssh" in note for note in plan.notes())


def test_stop_ends_a_hosts_pane_and_keeps_its_screen_here(host: Host) -> None:
    pane = host.pane("a", "echo last words; exec cat")
    eventually("the pane's text", lambda: "last words" in host.tmux("capture-pane", "-p", "-t",
                                                                    pane))
    done = crewops.stop(host.home, panes(host), "gpu.a")
    assert done.killed and "last words" in Path(str(done.pane_log)).read_text()
    assert not crew.exists(host.home, "gpu.a")
    listed = subprocess.run(["tmux", "-S", host.socket, "list-panes", "-a", "-F", "#{pane_id}"],
                            capture_output=True, text=True, timeout=30, check=False)
    assert pane not in listed.stdout.split()  # (its last pane gone, the server ended too)
    assert done.note is not None and "still registered on host gpu" in done.note


def test_the_crew_list_says_which_hosts_panes_are_read(host: Host) -> None:
    host.pane("a")
    crew.add(host.home, "gpu.b", "%999", pid=1, host="gpu")
    crew.add(host.home, "cpu.c", "%9", host="cpu")
    found = dict((m.name, state) for m, state in
                 crewops.pane_states(host.home, panes(host), crew.list(host.home)))
    assert found == {"gpu.a": "live", "gpu.b": "gone", "cpu.c": crewops.REMOTE}
    host.down.touch()
    found = dict((m.name, state) for m, state in
                 crewops.pane_states(host.home, panes(host), crew.list(host.home)))
    assert found["gpu.a"] == found["gpu.b"] == UNREACHABLE
    with pytest.raises(FirstmateError, match="cannot reach host gpu: ssh: connect"):
        crewops.steer(host.home, panes(host), "gpu.a", "go on")
    with pytest.raises(FirstmateError, match="no SSH settings"):
        crewops.steer(host.home, panes(host), "cpu.c", "go on")


def test_fm_top_shows_a_hosts_crews_as_that_host_says(host: Host) -> None:
    host.pane("a")
    gatherer = Gatherer(host.home.root, host.env)
    assert [(c.name, c.pane_state) for c in gatherer.gather().crews] == [("gpu.a", "live")]
    host.down.touch()
    assert [(c.name, c.pane_state) for c in gatherer.gather().crews] == [("gpu.a", UNREACHABLE)]


# --- the watcher ----------------------------------------------------------------------------------


def test_each_look_lists_a_host_once(host: Host) -> None:
    for number in range(20):
        host.pane(f"c{number}")
    source = HostsSource(host.home, panes(host))
    triage: list[str] = []
    for _ in range(4):
        assert source.poll(host.ctx(triage)) is None
    calls = host.calls()
    assert len(calls) == 4 and all("list-panes" in call for call in calls)
    assert triage == []


def test_a_hosts_panes_about_to_be_confirmed_are_read_in_one_ssh_call(host: Host) -> None:
    host.env["FM_STALE_START_GRACE"] = "0"
    ids = [host.pane(f"c{number}", "echo working; exec cat") for number in range(10)]
    eventually("the panes drawn", lambda: all(
        "working" in host.tmux("capture-pane", "-p", "-t", pane) for pane in ids))
    triage: list[str] = []
    source = HostsSource(host.home, panes(host))
    assert source.poll(host.ctx(triage)) is None  # (each pane's signature seen)
    wake = source.poll(host.ctx(triage, T0 + 1))  # (held: each read to confirm it quiet)
    assert wake is not None and wake.reason == "stale: gpu.c0"
    reads = [call for call in host.calls() if "capture-pane" in call]
    assert len(reads) == 1, reads
    assert all(f"capture-pane -p -t {pane} " in reads[0] for pane in ids), reads[0]
    assert triage == []


def test_an_unreachable_host_wakes_once_and_is_read_again_when_back(host: Host) -> None:
    host.pane("a")
    host.pane("b")
    triage: list[str] = []
    source = HostsSource(host.home, panes(host))
    assert source.poll(host.ctx(triage)) is None  # (seen live)
    host.down.touch()
    assert source.poll(host.ctx(triage)) is None  # (the first failure is tried again)
    wake = source.poll(host.ctx(triage))
    assert wake is not None and wake.key == "gpu.unreachable"
    assert wake.reason == ("signal: gpu.unreachable (crews: gpu.a, gpu.b): ssh: connect to "
                           "host h port 22: Connection refused")
    source.commit(wake, host.ctx(triage))
    again = HostsSource(host.home, panes(host))  # (the next watcher)
    for _ in range(3):
        assert again.poll(host.ctx(triage)) is None
    host.down.unlink()
    assert again.poll(host.ctx(triage)) is None
    assert not os.path.exists(mark_path(host.home, "gpu"))
    assert any("gpu is reachable again" in line for line in triage)


def test_a_pane_closed_while_its_host_was_unreachable_wakes_once_it_is_back(host: Host) -> None:
    pane = host.pane("a")
    source = HostsSource(host.home, panes(host))
    assert source.poll(host.ctx([])) is None
    host.down.touch()
    assert source.poll(host.ctx([])) is None
    wake = source.poll(host.ctx([]))
    assert wake is not None and wake.key == "gpu.unreachable"
    source.commit(wake, host.ctx([]))
    host.tmux("kill-pane", "-t", pane)
    host.down.unlink()
    wake = HostsSource(host.home, panes(host)).poll(host.ctx([]))
    assert wake is not None and wake.reason == "signal: gpu.a.exited"


def test_a_host_without_ssh_settings_is_not_read(host: Host) -> None:
    crew.add(host.home, "cpu.c", "%9", host="cpu")
    triage: list[str] = []
    source = HostsSource(host.home, panes(host), fleet=FleetScan(host.home))
    for _ in range(2):
        assert source.poll(host.ctx(triage)) is None
    assert host.calls() == []
    assert len(triage) == 1 and "no SSH settings" in triage[0]
