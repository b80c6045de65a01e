"""``fm fleet serve`` end to end: the primary runs its own nats-server and relay, a host added
with ``fm fleet host add`` joins with the file it wrote, and a remote ``fm crew status`` wakes
the primary's arm as a local one does. The relay killed mid-consume (kill -9) is started again
by the supervisor and every line arrives once, in order."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.fleet import paths, procs
from firstmate.store.home import Home
from firstmate.testing.procs import arm_env, eventually, spawn_arm
from remote_support import LocalFleet, free_port, reporter


class Served(LocalFleet):
    """A fleet whose server ``fm fleet serve`` runs (no nodes of the test's own)."""

    def __init__(self, tmp: Path, hosts: tuple[str, ...]) -> None:
        super().__init__(tmp, hosts, nodes=0)
        self.port = free_port()
        done = self.fm(self.primary, "fleet", "serve", "--listen", f"127.0.0.1:{self.port}")
        assert re.search(r"^fleet: serving fleet f[0-9a-f]{8} on nats://127\.0\.0\.1:", done.stdout)
        for host in hosts:
            added = self.fm(self.primary, "fleet", "host", "add", host)
            join = re.search(r"run there: (fm fleet join .*)$", added.stdout, re.M)
            assert join is not None, added.stdout
            assert "this machine's loopback" in added.stdout
            words = join.group(1).split()
            assert words[3] == f"nats://127.0.0.1:{self.port}"
            creds = self.creds(host)
            assert creds.stat().st_mode & 0o777 == 0o600
            self.fm(self.homes[host], *words[1:4], "--creds", str(creds), *words[6:])

    @property
    def urls(self) -> str:
        return f"nats://127.0.0.1:{self.port}"


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setenv("FIRSTMATE_KEYS_DIR", str(tmp_path / "keys"))
    fleet = Served(tmp_path, ("gpu", "build", "laptop"))
    try:
        yield fleet
    finally:
        fleet.close()


def test_a_remote_report_wakes_the_primarys_arm(served: Served, tmp_path: Path) -> None:
    home = served.homes["gpu"]
    served.fm(home, "crew", "add", "alice", "--pane", "%41", check=False)
    arm = spawn_arm(served.primary, tmp_path,
                    env={**arm_env(served.primary, tmp_path),
                         "FIRSTMATE_KEYS_DIR": served.base_env["FIRSTMATE_KEYS_DIR"]})
    try:
        assert arm.status.startswith("watcher: started")
        started = time.monotonic()
        served.fm(home, "crew", "status", "alice", "done: shipped from the gpu box")
        assert arm.wait_reason() == "signal: gpu.alice.status: done: shipped from the gpu box"
        assert time.monotonic() - started < 10
    finally:
        arm.stop()
    listed = served.fm(served.primary, "crew", "list").stdout
    assert "gpu.alice" in listed and "gpu:%41" in listed and "remote" in listed
    status = served.fm(served.primary, "fleet", "status").stdout
    assert "host gpu: seen" in status and "supervisor pid" in status


def test_the_relay_killed_mid_consume_loses_and_repeats_nothing(served: Served) -> None:
    crews = ["c0", "c1"]
    for host in served.hosts:
        served.add_crews(host, crews)
    plan = {h: [(c, f"working: {h} {c} {n}") for n in range(60) for c in crews]
            for h in served.hosts}
    expected = {(h, c): [t for name, t in plan[h] if name == c] for h in served.hosts
                for c in crews}
    relay = procs.holder(served.primary, paths.RELAY_LOCK)
    assert relay is not None
    running = [reporter(served, h, plan[h], 0.01) for h in served.hosts]
    eventually("the first lines on the primary", lambda: served.lines("gpu", "c0"))
    os.kill(relay, signal.SIGKILL)
    for proc in running:
        assert proc.wait(120) == 0
    served.wait_lines(expected)
    restarted = procs.holder(served.primary, paths.RELAY_LOCK)
    assert restarted is not None and restarted != relay
    run_log = (served.primary.state / "fleet" / "run.log").read_text()
    assert f"the relay (pid {relay}) ended with -9" in run_log


def test_a_host_that_went_down_sends_its_backlog_once_when_it_returns(served: Served) -> None:
    from firstmate.fast.crewreport import append_whole, crew_file

    home = served.homes["build"]
    served.add_crews("build", ["c0"])
    first = procs.holder(home, paths.FORWARD_LOCK)
    assert first is not None
    os.kill(first, signal.SIGKILL)  # the host goes down ...
    eventually("the forwarder's lock to be free", lambda: procs.holder(home, paths.FORWARD_LOCK)
               is None)
    # ... with lines its crews wrote that were never sent (appended without a ring).
    backlog = [f"working: step {n}" for n in range(20)]
    for n, text in enumerate(backlog):
        append_whole(crew_file(str(home.root), "c0", ".status"),
                     f"{1700000000 + n}.000\t{text}\n".encode())
    assert served.lines("build", "c0") == []
    # Back up: its next report starts a forwarder, which sends everything, in order, once.
    done = subprocess.run([sys.executable, "-m", "firstmate", "crew", "status", "c0",
                           "done: back up"], env=served.env(home), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    served.wait_lines({("build", "c0"): [*backlog, "done: back up"]})
    second = procs.holder(home, paths.FORWARD_LOCK)
    assert second is not None and second != first


def test_a_removed_host_can_no_longer_report(served: Served) -> None:
    served.fm(served.primary, "fleet", "host", "remove", "laptop")
    assert not served.creds("laptop").exists()
    home: Home = served.homes["laptop"]
    served.add_crews("laptop", ["c0"])
    proc = reporter(served, "laptop", [("c0", "done: not any more")])
    assert proc.wait(60) == 0
    log = home.state / "fleet" / "forward.log"
    eventually("the forwarder to be refused",
               lambda: log.exists() and ("Authorization" in log.read_text()
                                         or "cannot publish" in log.read_text()))
    assert served.lines("laptop", "c0") == []
