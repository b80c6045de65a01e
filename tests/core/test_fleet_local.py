"""What the fleet changes on one machine, with no NATS installed: a joined home's reports ring
(or start) its forwarder and import nothing more, remote crews are never looked for in the local
tmux, and ``fm fleet`` refuses bad input in one line with its documented exit code."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest
from firstmate.fast import crewreport, fleetbell
from firstmate.fleet import paths
from firstmate.store import crew
from firstmate.store.home import Home
from firstmate.testing.procs import eventually
from firstmate.watch.sources.base import PollContext
from firstmate.watch.sources.stale import StaleSource
from firstmate.watch.sources.status import StatusSource

CORE = str(Path(__file__).resolve().parents[2] / "core")
T0 = 1_700_000_000.0


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home").ensure()


def env_for(home: Home, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(PYTHONPATH=CORE, FM_HOME=str(home.root),
               FIRSTMATE_KEYS_DIR=str(tmp_path / "keys"))
    return env


def fm(home: Home, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "firstmate", *args], capture_output=True,
                          text=True, env=env_for(home, tmp_path), timeout=60, check=False)


def mark_joined(home: Home) -> str:
    """What fm fleet join leaves for reports: the forwarder's lock file."""
    paths.ensure(home)
    lock = paths.path(home, paths.FORWARD_LOCK)
    Path(lock).touch(mode=0o600)
    return lock


# --- the report path ---------------------------------------------------------------------


def test_a_home_in_no_fleet_pays_one_stat_and_no_import(home: Home, tmp_path: Path) -> None:
    assert os.path.join("state", fleetbell.DIR, fleetbell.LOCK) == crewreport.JOINED
    crew.add(home, "alice", "%1")
    code = ("import sys\nfrom firstmate.cli.main import main\n"
            "main(['crew', 'status', 'alice', 'done: local'])\n"
            "print('firstmate.fast.fleetbell' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env_for(home, tmp_path), timeout=60, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr
    assert not os.path.exists(os.path.join(home.state, "fleet"))


def test_a_running_forwarder_is_rung_by_every_report(home: Home) -> None:
    import fcntl

    crew.add(home, "alice", "%1")
    lock = mark_joined(home)
    holder = os.open(lock, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)  # as the forwarder holds it
    bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    bell.bind(paths.path(home, paths.FORWARD_BELL))
    bell.settimeout(10)
    try:
        crewreport.status(str(home.root), "alice", "working: x")
        assert bell.recv(16) == b"!"
        crewreport.turn_ended(str(home.root), "alice")
        assert bell.recv(16) == b"!"
        assert not os.path.exists(paths.path(home, fleetbell.SPAWNED))  # nothing started
    finally:
        bell.close()
        os.close(holder)


def test_a_registration_that_changed_names_its_crew_and_rings_the_forwarder(home: Home) -> None:
    import fcntl

    lock = mark_joined(home)
    holder = os.open(lock, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)  # as the forwarder holds it
    bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    bell.bind(paths.path(home, paths.FORWARD_BELL))
    bell.settimeout(10)
    try:
        crew.add(home, "alice", "%1")
        assert bell.recv(16) == b"!"
        crew.add(home, "alice", "%2", replace=True)
        assert bell.recv(16) == b"!"
        crew.unregister(home, "alice")
        assert bell.recv(16) == b"!"
        # Each change names the crew in the change journal before it rings (the forwarder
        # looks only at the crews named there: firstmate.fleet.changed).
        journal = (home.crew_dir / crewreport.CHANGES).read_text()
        assert journal == "alice\n" * 3
    finally:
        bell.close()
        os.close(holder)


def test_a_report_starts_a_forwarder_that_is_not_running(home: Home, tmp_path: Path) -> None:
    crew.add(home, "alice", "%1")
    lock = mark_joined(home)
    done = fm(home, tmp_path, "crew", "status", "alice", "done: x")
    assert done.returncode == 0, done.stderr
    # The forwarder it started finds no membership for this home (as in a copied home): it
    # says so in its log and unmarks the home, so later reports stop trying.
    eventually("the forwarder to unmark the home", lambda: not os.path.exists(lock))
    log = Path(paths.path(home, "forward.log")).read_text()
    assert "has not joined a fleet" in log
    assert os.path.exists(paths.path(home, fleetbell.SPAWNED))


def test_reports_start_a_forwarder_at_most_once_per_interval(home: Home) -> None:
    mark_joined(home)
    Path(paths.path(home, fleetbell.SPAWNED)).touch()
    assert fleetbell.start(str(home.root)) is False
    old = time.time() - fleetbell.RESTART_AFTER - 1
    os.utime(paths.path(home, fleetbell.SPAWNED), (old, old))
    os.unlink(paths.path(home, paths.FORWARD_LOCK))  # (the child finds nothing to do)
    assert fleetbell.start(str(home.root)) is True


def test_a_joined_homes_report_imports_no_nats_and_no_fleet_code(home: Home,
                                                                  tmp_path: Path) -> None:
    crew.add(home, "alice", "%1")
    mark_joined(home)
    Path(paths.path(home, fleetbell.SPAWNED)).touch()  # (no forwarder start in this test)
    code = ("import sys\nfrom firstmate.cli.main import main\n"
            "code = main(['crew', 'status', 'alice', 'done: x'])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'nats' "
            "or m.startswith('firstmate.fleet')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env_for(home, tmp_path), timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --- remote crews in the primary's watcher ----------------------------------------------------


@attrs.define
class Backend:
    """A crew backend that records what it is asked (the plugin boundary)."""

    asked: list[str] = attrs.Factory(list)
    last_error: str | None = "no such pane"

    def capture(self, pane: str) -> str | None:
        self.asked.append(pane)
        return None

    def busy(self, pane: str) -> bool:
        self.asked.append(pane)
        return True


def ctx(home: Home, now: float, triage: list[str]) -> PollContext:
    return PollContext(home=home, env={"FM_STALE_SLICE_MS": "600000", "FM_SIGNAL_GRACE": "0"},
                       now=now, poll=1, triage=triage.append)


def test_a_remote_crews_pane_is_never_looked_for_here(home: Home) -> None:
    crew.add(home, "gpu.alice", "%3", host="gpu")
    backend = Backend()
    source = StaleSource(home, backend)  # type: ignore[arg-type]
    triage: list[str] = []
    for step in range(3):
        assert source.poll(ctx(home, T0 + 20 * step, triage)) is None
    assert backend.asked == []
    assert triage == []


def test_a_remote_crews_line_needs_no_pane_to_wake(home: Home) -> None:
    crew.add(home, "gpu.alice", "%3", host="gpu")
    crew.append_status(home, "gpu.alice", "working: chatter a busy pane would absorb")
    backend = Backend()
    source = StatusSource(home, backend)  # type: ignore[arg-type]
    wake = source.poll(ctx(home, T0, []))
    assert wake is not None and wake.key == "gpu.alice.status"
    assert backend.asked == []


def test_fm_crew_list_shows_a_remote_crew_as_remote(home: Home, tmp_path: Path) -> None:
    crew.add(home, "gpu.alice", "%3", host="gpu")
    done = fm(home, tmp_path, "crew", "list", "--json")
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)["crews"]
    assert (row["name"], row["pane_state"]) == ("gpu.alice", "remote")


def test_a_remote_crews_pane_is_never_typed_into_here(home: Home, tmp_path: Path) -> None:
    crew.add(home, "gpu.alice", "%3", host="gpu")
    for args in (("steer", "gpu.alice", "go on"), ("stop", "gpu.alice"), ("peek", "gpu.alice"),
                 ("attach", "gpu.alice")):
        done = fm(home, tmp_path, "crew", *args)
        assert done.returncode == 1, done.stderr
        assert "works on host gpu" in done.stderr and "fm crew remove gpu.alice" in done.stderr
    assert crew.exists(home, "gpu.alice")


# --- fm fleet's refusals ---------------------------------------------------------------------


def test_status_of_a_home_in_no_fleet(home: Home, tmp_path: Path) -> None:
    done = fm(home, tmp_path, "fleet", "status", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"role": None}
    assert "in no fleet" in fm(home, tmp_path, "fleet", "status").stdout


def test_a_damaged_membership_is_refused_with_its_fix(home: Home, tmp_path: Path) -> None:
    from firstmate.fleet import config

    env = env_for(home, tmp_path)
    directory = config.ensure_dir(str(home.root), env)
    member = Path(directory) / config.MEMBER
    member.write_text("{not json")
    member.chmod(0o600)
    done = fm(home, tmp_path, "fleet", "status")
    assert done.returncode == 4, done.stderr
    assert f"remove {member}" in done.stderr and done.stderr.count("\n") == 1
    member.write_text("{}")
    member.chmod(0o644)
    done = fm(home, tmp_path, "fleet", "status")
    assert done.returncode == 4 and f"chmod 600 {member}" in done.stderr


def test_join_needs_credentials_from_a_file(home: Home, tmp_path: Path) -> None:
    done = fm(home, tmp_path, "fleet", "join", "nats://127.0.0.1:4222")
    assert done.returncode == 2
    assert "--creds FILE" in done.stderr and "FM_FLEET_CREDS" in done.stderr
    assert done.stderr.count("\n") == 1


def test_credentials_others_can_read_are_refused(home: Home, tmp_path: Path) -> None:
    creds = tmp_path / "gpu.creds"
    creds.write_text("{}")
    creds.chmod(0o644)
    done = fm(home, tmp_path, "fleet", "join", "--creds", str(creds))
    assert done.returncode == 4
    assert f"chmod 600 {creds}" in done.stderr


def test_a_url_carrying_a_password_is_refused(home: Home, tmp_path: Path) -> None:
    creds = tmp_path / "gpu.creds"
    creds.write_text(json.dumps({"format": "firstmate-fleet-creds", "fleet": "f1",
                                 "host": "gpu", "urls": ["nats://127.0.0.1:1"],
                                 "auth": {"token": "t"}, "key": "00" * 32}))
    creds.chmod(0o600)
    done = fm(home, tmp_path, "fleet", "join", "nats://me:secret@127.0.0.1:1", "--creds",
              str(creds))
    assert done.returncode == 2
    assert "carries no credentials" in done.stderr and "secret" not in done.stderr
    wrong = fm(home, tmp_path, "fleet", "join", "--creds", str(creds), "--host", "cpu")
    assert wrong.returncode == 2 and "host gpu's credentials" in wrong.stderr


def test_hosts_are_added_to_a_fleet_this_home_serves(home: Home, tmp_path: Path) -> None:
    done = fm(home, tmp_path, "fleet", "host", "add", "gpu")
    assert done.returncode == 2
    assert "fm fleet serve" in done.stderr


def test_without_the_extra_fm_fleet_says_what_to_install(home: Home, tmp_path: Path) -> None:
    try:
        import nats  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("nats-py is installed here (the fleet env tests the commands for real)")
    creds = tmp_path / "relay.json"
    creds.write_text(json.dumps({"user": "u", "password": "p"}))
    creds.chmod(0o600)
    done = fm(home, tmp_path, "fleet", "use", "nats://127.0.0.1:1", "--creds", str(creds))
    assert done.returncode == 1
    assert "pip install 'firstmate[fleet]'" in done.stderr
