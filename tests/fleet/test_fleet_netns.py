"""A host's network cut for real: the host is a Linux network namespace the test makes, joined to
this machine by a veth pair on private 10.x addresses, with its sshd, its tmux server (its
crews' panes) and its fm (its forwarder) inside it. Its link is set down: its crews become
unreachable, once, as one wake of the whole host; lines its crews report meanwhile wait in its
outbox; the link set up again, the host is read again without a wake and every line reaches the
primary once.

Needs CAP_NET_ADMIN (``ip netns add``): skipped with the reason where the process lacks it,
except under CI, where ``FM_TEST_REQUIRE_NETNS=1`` (set by .ci/run, which runs as root) makes it
fail. Everything the test makes (namespace, veth, processes inside) is removed by the
fixture's finaliser, whatever happened. Nothing is routed off this machine: the namespace's only
link is the veth pair, on addresses no other machine answers for.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.testing.procs import eventually
from remote_support import DEADLINE, accepting
from ssh_support import Rig, Sshd, reason

#: Relays one TCP port of the namespace's loopback to an address outside it, in both directions
#: (run inside the namespace: its fm reaches the fleet's server at the URL the primary uses).
RELAY = """
import socket, sys, threading
listen, target, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
server = socket.create_server((listen, port))
def pump(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
while True:
    client, _ = server.accept()
    try:
        upstream = socket.create_connection((target, port), timeout=5)
    except OSError:
        client.close()
        continue
    upstream.settimeout(None)
    threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
    threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
"""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


class Netns:
    """One network namespace and the veth pair that is its only link to this machine."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 10000:04d}{random.randrange(16 ** 3):03x}"
        self.name = f"fmtest-{tag}"
        self.outside, self.inside = f"fmv{tag}a", f"fmv{tag}b"
        net = random.randrange(1 << 14)  # (a /30 of 10.200.0.0/16)
        base = f"10.{200 + (net >> 12)}.{(net >> 4) & 255}.{(net & 15) * 16}"
        prefix, last = base.rsplit(".", 1)
        self.outer, self.inner = f"{prefix}.{int(last) + 1}", f"{prefix}.{int(last) + 2}"
        self.made: list[str] = []

    @property
    def exec(self) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.name)

    def create(self) -> None:
        ip("netns", "add", self.name)
        self.made.append("netns")
        ip("link", "add", self.outside, "type", "veth", "peer", "name", self.inside)
        self.made.append("veth")
        ip("link", "set", self.inside, "netns", self.name)
        ip("addr", "add", f"{self.outer}/30", "dev", self.outside)
        ip("link", "set", self.outside, "up")
        ip("-n", self.name, "addr", "add", f"{self.inner}/30", "dev", self.inside)
        ip("-n", self.name, "link", "set", self.inside, "up")
        ip("-n", self.name, "link", "set", "lo", "up")

    def cut(self) -> None:
        ip("link", "set", self.outside, "down")

    def restore(self) -> None:
        ip("link", "set", self.outside, "up")

    def pids(self) -> list[int]:
        done = ip("netns", "pids", self.name, check=False)
        return [int(p) for p in done.stdout.split()]

    def close(self) -> None:
        if "netns" in self.made:
            for pid in self.pids():  # (everything the test started inside it)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if "veth" in self.made:
            ip("link", "del", self.outside, check=False)  # (its peer goes with it)
        if "netns" in self.made:
            ip("netns", "del", self.name, check=False)


def unavailable(why: str) -> None:
    """Skip for *why*; fail under CI (``FM_TEST_REQUIRE_NETNS=1``, set by .ci/run)."""
    if os.environ.get("FM_TEST_REQUIRE_NETNS") == "1":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture
def netns() -> Iterator[Netns]:
    if sys.platform != "linux" or shutil.which("ip") is None:
        unavailable("no ip command (iproute2): a host as a network namespace needs Linux's")
    made = Netns()
    try:
        try:
            made.create()
        except RuntimeError as exc:
            unavailable(f"cannot make a network namespace here ({exc}): it needs "
                        "CAP_NET_ADMIN (root; CI runs as root)")
        yield made
    finally:
        made.close()


class NetnsRig(Rig):
    """Rig's host gpu inside *ns*: its sshd listens on the namespace's address, its tmux server
    and its fm run inside it, and the fleet's server is reached from inside it through the veth
    at the address the primary uses (a relay in the namespace, one outside)."""

    def __init__(self, tmp: Path, ns: Netns) -> None:
        self.ns = ns
        self.relays: list[subprocess.Popen[bytes]] = []
        super().__init__(tmp, Sshd(tmp, address=ns.inner, prefix=ns.exec), prefix=ns.exec,
                         env={"FM_SSH_TIMEOUT": "3", "FM_SSH_RETRY": "0.5"})
        port = self.fleet.nodes[0].port
        self._relay((), ns.outer, "127.0.0.1", port)
        self._relay(ns.exec, "127.0.0.1", ns.outer, port)

    def _relay(self, prefix: tuple[str, ...], listen: str, target: str, port: int) -> None:
        proc = subprocess.Popen([*prefix, sys.executable, "-c", RELAY, listen, target, str(port)],
                                stdin=subprocess.DEVNULL)
        self.relays.append(proc)
        if not prefix:
            eventually("the relay outside", lambda: accepting(port, listen), DEADLINE,
                       gone=proc, gone_means="the relay exited")

    def host_fm(self, *args: str) -> subprocess.CompletedProcess[str]:
        """fm on the host, inside its namespace (as its crews run it)."""
        done = subprocess.run([*self.ns.exec, sys.executable, "-m", "firstmate", *args],
                              capture_output=True, text=True, timeout=120, check=False,
                              env=self.fleet.env(self.host_home))
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def drained(self) -> list[str]:
        """The primary's pending wakes' keys, drained and acknowledged."""
        drained = json.loads(self.fm("wake", "drain", "--json").stdout)
        if drained.get("ack_command"):
            self.fm(*str(drained["ack_command"]).split()[1:])
        return [str(row["key"]) for row in drained.get("rows", drained.get("wakes", []))]

    def close(self) -> None:
        try:
            super().close()
        finally:
            for proc in self.relays:
                proc.kill()
                proc.wait(DEADLINE)


@pytest.fixture
def rig(tmp_path: Path, netns: Netns) -> Iterator[NetnsRig]:
    made = NetnsRig(tmp_path, netns)
    try:
        yield made
    finally:
        made.close()


def test_a_hosts_link_cut_wakes_once_and_its_lines_arrive_once_when_back(rig: NetnsRig) -> None:
    assert not accepting(rig.sshd.port)  # (its sshd is in the namespace, not on this loopback)
    rig.add_host()
    panes = [rig.pane() for _ in range(3)]
    for number, pane in enumerate(panes):
        rig.fm("crew", "add", f"c{number}", "--host", "gpu", "--pane", pane)
    rig.host_fm("crew", "status", "c0", "working: before the cut")
    eventually("the host's report through the fleet",
               lambda: rig.fleet.lines("gpu", "c0") == ["working: before the cut"])
    assert reason(rig.watch()) == "signal: gpu.c0.status: working: before the cut"
    assert rig.drained() == ["gpu.c0.status"]
    watcher = rig.watch()
    eventually("the control connection", lambda: rig.master(), gone=watcher,
               gone_means="the watcher ended")

    rig.ns.cut()
    line = reason(watcher)
    assert line.startswith("signal: gpu.unreachable (crews: gpu.c0, gpu.c1, gpu.c2): "), line
    states = json.loads(rig.fm("crew", "list", "--json").stdout)["crews"]
    assert {c["pane_state"] for c in states} == {"unreachable"}
    keys = rig.drained()
    assert keys == ["gpu.unreachable"], keys
    # Its crews report meanwhile: kept on the host (its outbox), nothing reaches the primary.
    rig.host_fm("crew", "status", "c1", "done: during the cut")
    rig.host_fm("crew", "status", "c2", "blocked: during the cut")
    second = rig.watch()  # (still cut: nobody is woken again for the host or its crews)
    with pytest.raises(subprocess.TimeoutExpired):
        second.wait(8)  # (longer than two listings' FM_SSH_TIMEOUT and a retry)
    assert rig.fleet.lines("gpu", "c1") == []

    rig.ns.restore()
    assert reason(second).startswith("signal: gpu.c")  # (the lines, once the link is back)
    rig.fleet.wait_lines({("gpu", "c0"): ["working: before the cut"],
                          ("gpu", "c1"): ["done: during the cut"],
                          ("gpu", "c2"): ["blocked: during the cut"]})
    keys = rig.drained()
    # (one wake or two, as the lines arrive in one batch or in two; never the host or a stale)
    assert keys and set(keys) <= {"gpu.c1.status", "gpu.c2.status"}, keys
    third = rig.watch()
    eventually("the host read again", lambda: not os.path.exists(
        rig.primary.state / "fleet" / "gpu.unreachable"), gone=third,
        gone_means="the watcher ended")
    rig.tmux("kill-pane", "-t", panes[1])
    assert reason(third) == "signal: gpu.c1.exited"
    assert rig.drained() == ["gpu.c1.exited"]
    # Every line once, in order, after all of it.
    for name, want in (("c0", ["working: before the cut"]), ("c1", ["done: during the cut"]),
                       ("c2", ["blocked: during the cut"])):
        assert rig.fleet.lines("gpu", name) == want
