"""Hosts over SSH for the fleet tests: a real ``sshd`` on 127.0.0.1 on a free port, with a
throw-away host key and user key the test makes, logging in as this user; each "host" is a
home of its own with its own private tmux server, reached through that sshd.

Without an ``sshd`` (Debian's openssh-server) the tests that need one are skipped, except under
CI, where ``FM_TEST_REQUIRE_SSHD=1`` (set by .ci/run, which installs it) makes them fail.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from firstmate.fleet import sshhosts
from firstmate.testing.procs import eventually
from firstmate.testing.sites import declare
from remote_support import DEADLINE, LocalFleet, accepting, free_port

REPO = Path(__file__).resolve().parents[2]
FAKECREW = REPO / "tests" / "core" / "fakecrew"


def sshd_binary() -> str | None:
    found = shutil.which("sshd") or next(
        (p for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd") if os.access(p, os.X_OK)), None)
    return found


def require_sshd() -> str:
    """The sshd binary; the test is skipped without one (failed under CI)."""
    found = sshd_binary()
    if found is None:
        if os.environ.get("FM_TEST_REQUIRE_SSHD") == "1":
            pytest.fail("no sshd: install openssh-server (.ci/run does)")
        pytest.skip("no sshd here (Debian's openssh-server; CI installs it)")
    return found


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fm-test", "-f",
                    str(path)], check=True, capture_output=True, timeout=30)
    return path


class Sshd:
    """One sshd on a loopback port: :attr:`key` logs in as this user; :meth:`stop` ends the
    listener (sessions already open go on), :meth:`rekey` gives it another host key."""

    def __init__(self, tmp: Path, setenv: dict[str, str] | None = None, *,
                 address: str = "127.0.0.1", prefix: tuple[str, ...] = ()) -> None:
        self.binary = require_sshd()
        #: Where it listens, and what it runs under (a network namespace's ``ip netns exec``).
        self.address = address
        self.prefix = prefix
        self.dir = tmp / "sshd"
        self.dir.mkdir(mode=0o700)
        self.host_key = keygen(self.dir / "host_key")
        self.key = keygen(self.dir / "user_key")
        (self.dir / "authorized_keys").write_text((self.dir / "user_key.pub").read_text())
        self.port = free_port()
        self.user = getpass.getuser()
        self.setenv = dict(setenv or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.dir / "sshd.log"

    @property
    def dest(self) -> str:
        return f"{self.user}@{self.address}"

    def _config(self) -> Path:
        lines = [f"Port {self.port}", f"ListenAddress {self.address}", f"HostKey {self.host_key}",
                 f"PidFile {self.dir / 'sshd.pid'}",
                 f"AuthorizedKeysFile {self.dir / 'authorized_keys'}", "StrictModes no",
                 "UsePAM no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
                 "PubkeyAuthentication yes", "PermitRootLogin prohibit-password",
                 f"AllowUsers {self.user}", "MaxSessions 64", "MaxStartups 64",
                 "LogLevel ERROR", "PrintMotd no"]
        # The sessions' HOME is a fresh folder of the test's: the login shell that runs each
        # remote command then reads no startup file of this machine's user (one that runs a
        # tool taking a lock, killed with the host mid-test, would hang every later session).
        home = self.dir / "home"
        home.mkdir(exist_ok=True)
        setenv = {"HOME": str(home), **self.setenv}
        lines.append("SetEnv " + " ".join(f'"{k}={v}"' for k, v in setenv.items()))
        path = self.dir / "sshd_config"
        path.write_text("\n".join(lines) + "\n")
        return path

    def start(self) -> None:
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", 0o755, exist_ok=True)  # (privilege separation, as root)
        config = self._config()
        check = subprocess.run([self.binary, "-t", "-f", str(config)], capture_output=True,
                               text=True, timeout=30)
        assert check.returncode == 0, check.stderr
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([*self.prefix, self.binary, "-D", "-e", "-f", str(config)],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        eventually(f"sshd on port {self.port}", lambda: accepting(self.port, self.address),
                   DEADLINE,
                   gone=self.proc, gone_means="sshd exited")

    def stop(self) -> None:
        """End the listener: no new connection is taken (those open go on)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(DEADLINE)
        self.proc = None

    def rekey(self) -> None:
        """Another host key from the next start (a host that is not the one fm knows)."""
        for path in (self.host_key, Path(f"{self.host_key}.pub")):
            path.unlink()
        keygen(self.host_key)

    def sessions(self) -> list[int]:
        """The pids of sshd's per-connection processes (children of no listener of ours)."""
        found = subprocess.run(["pgrep", "-f", f"sshd: {self.user}"], capture_output=True,
                               text=True, timeout=30, check=False)
        return [int(p) for p in found.stdout.split()]


def master_pid(ssh_argv_base: list[str], dest: str) -> int | None:
    """The pid of the control master *ssh_argv_base* (ssh and its options) talks to."""
    done = subprocess.run([*ssh_argv_base, "-O", "check", "--", dest], capture_output=True,
                          text=True, timeout=30, check=False)
    found = re.search(r"pid=(\d+)", done.stderr)
    return int(found.group(1)) if found else None


def kill(pid: int | None) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def remote_fm(home: Path, keys: Path, records: Path) -> str:
    """The fm command a host's settings name: this interpreter's fm, in the host's own home and
    keys directory, with the stand-in harness plugin importable."""
    site = records.parent / "fakecrew-site"  # (its entry point: fm finds plugins by nothing else)
    declare(site, "fakecrew", "firstmate_plugin_fakecrew")
    paths = os.pathsep.join([str(FAKECREW), str(site)])  # (fm itself is this interpreter's)
    words = ["env", f"FM_HOME={home}", f"FIRSTMATE_KEYS_DIR={keys}", f"PYTHONPATH={paths}",
             f"FAKECREW_DIR={records}", sys.executable, "-m", "firstmate"]
    return shlex.join(words)


class Rig:
    """A primary (``fm fleet use`` on a test nats-server) and host gpu reached over SSH."""

    def __init__(self, tmp: Path, sshd: Sshd | None = None, prefix: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        self.tmp = tmp
        #: What the host's own commands run under (a network namespace's ``ip netns exec``).
        self.prefix = prefix
        self.sshd = sshd or Sshd(tmp)
        self.sshd.start()
        self.socket = str(tmp / "gpu.tmux")
        self.records = tmp / "records"
        self.records.mkdir()
        self.project = tmp / "project"
        self.project.mkdir()
        self.fleet = LocalFleet(tmp, ("gpu",), env={
            "FM_SSH_CONFIG": "none", "FM_TMUX_SOCKET": str(tmp / "local.tmux"),
            "FM_SIGNAL_GRACE": "0", "FM_POLL": "1", "FM_SSH_RETRY": "0.2",
            "FM_SSH_TIMEOUT": "10", "FM_SSH_CONNECT_TIMEOUT": "3", "FM_REMOTE_WAIT": "30",
            **(env or {})})
        self.fleet.setup(join=False)
        self.primary = self.fleet.primary
        self.host_home = self.fleet.homes["gpu"]

    def add_host(self, *extra: str, identity: Path | None = None,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        # (the host's own home, and the same keys directory: its secrets are by home)
        fm_there = remote_fm(self.host_home.root, self.fleet.keys, self.records)
        return self.fm("fleet", "host", "add", "gpu", "--ssh", self.sshd.dest, "--port",
                       str(self.sshd.port), "--identity", str(identity or self.sshd.key),
                       "--remote-dir", str(self.project), "--remote-fm", fm_there,
                       "--remote-tmux-socket", self.socket, *extra, check=check)

    def fm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.fleet.fm(self.primary, *args, check=check)

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The host's tmux, asked directly (not through fm)."""
        return subprocess.run([*self.prefix, "tmux", "-S", self.socket, *args], capture_output=True,
                              text=True, timeout=30, check=False)

    def pane(self, program: str = "exec cat") -> str:
        """A pane of the host's tmux running *program*; its id."""
        if self.tmux("has-session").returncode:
            made = self.tmux("new-session", "-d", "-s", "work", "-x", "120", "-y", "30", "-P",
                             "-F", "#{pane_id}", "sh", "-c", program)
        else:
            made = self.tmux("new-window", "-d", "-t", "work:", "-P", "-F", "#{pane_id}", "sh",
                             "-c", program)
        assert made.returncode == 0, made.stderr
        return made.stdout.strip()

    def ssh_base(self) -> list[str]:
        access = sshhosts.load(self.primary, self.fleet.env(self.primary), "gpu")
        assert access is not None
        return sshhosts.base_argv(self.primary, self.fleet.env(self.primary), access)[:-1]

    def master(self) -> int | None:
        return master_pid(self.ssh_base(), self.sshd.dest)

    def watch(self) -> subprocess.Popen[str]:
        """One watcher cycle of the primary (``fm watch``)."""
        return subprocess.Popen([sys.executable, "-m", "firstmate", "watch"], text=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=self.fleet.env(self.primary))

    def handled(self) -> None:
        """Play the primary handling its wake: drain, then run the acknowledgement printed."""
        drained = json.loads(self.fm("wake", "drain", "--json").stdout)
        if drained.get("ack_command"):
            self.fm(*str(drained["ack_command"]).split()[1:])

    def close(self) -> None:
        self.fleet.close()  # (fm fleet stop ends the control masters too)
        self.tmux("kill-server")
        self.sshd.stop()
        for pid in self.sshd.sessions():
            kill(pid)


def reason(watcher: subprocess.Popen[str], deadline: float = DEADLINE) -> str:
    """The watcher's reason line (it ends once it printed one)."""
    assert watcher.stdout is not None
    ready, _, _ = select.select([watcher.stdout], [], [], deadline)
    if not ready:
        watcher.kill()
        pytest.fail(f"no wake within {deadline}s")
    line = watcher.stdout.readline().rstrip("\n")
    watcher.wait(DEADLINE)
    return line


def turns(rig: Rig, name: str) -> list[str]:
    path = rig.records / f"{name}.turns"
    return path.read_text().splitlines() if path.exists() else []
