"""Remote panes over SSH at fleet scale: the primary's watcher reading ``FM_BENCH_FLEET_HOSTS``
(3) hosts × ``FM_BENCH_FLEET_CREWS`` (200) crews' panes, each host through one persistent SSH
connection.

Run with ``python bench/fleet_ssh.py`` (needs an ``sshd`` — Debian's openssh-server — and tmux).
On this machine it sets up what four machines would run: an ``sshd`` on a loopback port (a
throw-away host key and user key), and per host a private tmux server with one window per crew,
each a working agent's pane that never changes (busy and never stale, as bench/idle.py's). The
primary is a home whose fleet configuration names the hosts with their SSH settings (as ``fm
fleet host add H --ssh …`` writes them, MAC included), and whose crews are registered as the
relay registers a host's crews (``H.cN``, ``host H``, bound to the pane's id, pid and start time
there). NATS plays no part in reading panes, so none runs here (bench/fleet_remote.py measures
the reports).

A real ``fm arm`` is parked on the primary (``FM_POLL`` at its default, 15 s): its watcher's
first looks list every host, and its stale sources read each pane once to find it busy. Once
every crew's pane-state says so, over ``FM_BENCH_IDLE_SECONDS`` (60) it measures, as % of one
core: the arm, the watcher, the ssh clients it ran (its reaped children), the hosts' control
masters (the primary's side of the connections), and apart the hosts' side (sshd sessions and
the tmux servers), against a ``sleep``; and how many ``list-panes`` each host ran (a wrapper
tmux there counts them) against the watcher's looks. Goal: the primary's side ≤ 1 % of a core.

The last line is one JSON object (also written to ``bench/results/fleet_ssh.json``).
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _common import emit  # the script's own folder is first on sys.path
from _fleet import BUSY_PANE, CORE, own_seconds, read_line, reaped_seconds

HOSTS = int(os.environ.get("FM_BENCH_FLEET_HOSTS", "3"))
CREWS = int(os.environ.get("FM_BENCH_FLEET_CREWS", "200"))
IDLE = float(os.environ.get("FM_BENCH_IDLE_SECONDS", "60"))
GOAL_IDLE_PCT = 1.0
DEADLINE = 600.0
#: The hosts' tmux: counts every list-panes it runs, then is tmux.
COUNTING_TMUX = """#!/bin/sh
case " $* " in *" list-panes "*) echo x >> "$(dirname "$0")/lists.$FM_BENCH_HOST" ;; esac
exec tmux "$@"
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True, capture_output=True, timeout=60)
    return path


class Bench:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("FM_", "FIRSTMATE_"))}
        self.env.update({"PYTHONPATH": str(CORE), "FIRSTMATE_KEYS_DIR": str(tmp / "keys"),
                         "FIRSTMATE_PLUGINS": "none", "FM_SSH_CONFIG": "none",
                         "FM_TMUX": str(tmp / "no-tmux"), "FM_SIGNAL_GRACE": "0"})
        self.hosts = [f"h{i}" for i in range(HOSTS)]
        self.sshd: subprocess.Popen[bytes] | None = None
        self.port = free_port()

    def sshd_start(self) -> None:
        binary = shutil.which("sshd") or "/usr/sbin/sshd"
        if not os.access(binary, os.X_OK):
            raise SystemExit("bench/fleet_ssh.py needs an sshd (Debian's openssh-server)")
        directory = self.tmp / "sshd"
        directory.mkdir(mode=0o700)
        host_key, self.key = keygen(directory / "host_key"), keygen(directory / "user_key")
        (directory / "authorized_keys").write_text((directory / "user_key.pub").read_text())
        config = directory / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}",
            f"PidFile {directory / 'sshd.pid'}",
            f"AuthorizedKeysFile {directory / 'authorized_keys'}", "StrictModes no",
            "UsePAM no", "PasswordAuthentication no", "PermitRootLogin prohibit-password",
            f"AllowUsers {getpass.getuser()}", "MaxSessions 64", "LogLevel ERROR"]) + "\n")
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", 0o755, exist_ok=True)
        self.sshd = subprocess.Popen([binary, "-D", "-e", "-f", str(config)],
                                     stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 30
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            if time.monotonic() > end or self.sshd.poll() is not None:
                raise SystemExit("sshd did not start")
            time.sleep(0.05)

    def setup(self) -> None:
        from firstmate.fleet import config, sshhosts
        from firstmate.fleet.config import Auth, HostEntry, Primary
        from firstmate.store import crew
        from firstmate.store.home import Home
        from firstmate.watch.backends.panes import start_ticks

        self.sshd_start()
        self.primary = Home(self.tmp / "p").ensure()
        root = str(self.primary.root)
        entries = []
        self.servers: list[psutil.Process] = []
        for host in self.hosts:
            socket_path = str(self.tmp / f"{host}.tmux")
            wrapper = self.tmp / f"tmux-{host}"
            wrapper.write_text(COUNTING_TMUX.replace('"$(dirname "$0")', f'"{self.tmp}')
                               .replace("$FM_BENCH_HOST", host))
            wrapper.chmod(0o700)
            tmux = ["tmux", "-S", socket_path, "-f", "/dev/null"]
            subprocess.run([*tmux, "new-session", "-d", "-s", "w", "-x", "120", "-y", "30",
                            "sh", "-c", BUSY_PANE], check=True, timeout=DEADLINE)
            for _ in range(CREWS - 1):
                subprocess.run([*tmux, "new-window", "-d", "-t", "w", "sh", "-c", BUSY_PANE],
                               check=True, timeout=DEADLINE)
            listed = subprocess.run([*tmux, "list-panes", "-a", "-F", "#{pane_id} #{pane_pid}"],
                                    capture_output=True, text=True, check=True,
                                    timeout=DEADLINE).stdout.split("\n")
            for i, line in enumerate(filter(None, listed)):
                pane, pid = line.split()
                crew.add(self.primary, f"{host}.c{i}", pane, pid=int(pid),
                         started=start_ticks(int(pid)), host=host)
            self.servers.append(psutil.Process(int(subprocess.run(
                [*tmux, "display-message", "-p", "#{pid}"], capture_output=True, text=True,
                check=True, timeout=DEADLINE).stdout)))
            access = sshhosts.settings(host, f"{getpass.getuser()}@127.0.0.1", port=self.port,
                                       identity=str(self.key), tmux=str(wrapper),
                                       socket=socket_path)
            sshhosts.first_contact(self.primary, self.env, access)  # (records the host key)
            entries.append(HostEntry(host, "00" * 32, Auth.fresh(f"u{host}"),
                                     sshhosts.sealed(root, self.env, access)))
        config.save_primary(root, self.env, Primary("fbench", "use", ("nats://127.0.0.1:1",),
                                                    Auth.fresh("relay"),
                                                    hosts=tuple(entries)))

    def lists(self) -> dict[str, int]:
        found = {}
        for host in self.hosts:
            path = self.tmp / f"lists.{host}"
            found[host] = len(path.read_text().splitlines()) if path.exists() else 0
        return found

    def busy(self) -> int:
        from firstmate.store import crew
        from firstmate.watch.sources.stale import PaneState

        count = 0
        for host in self.hosts:
            for i in range(CREWS):
                try:
                    text = crew.path(self.primary, f"{host}.c{i}", crew.PANE_STATE).read_text()
                except OSError:
                    continue
                state = PaneState.decode(text)
                count += state is not None and state.busy_at != "-"
        return count

    def masters(self) -> list[psutil.Process]:
        from firstmate.fleet import sshhosts

        found = []
        for access in sshhosts.every(self.primary, self.env):
            argv = sshhosts.base_argv(self.primary, self.env, access)[:-1]
            done = subprocess.run([*argv, "-O", "check", "--", access.dest],
                                  capture_output=True, text=True, timeout=60, check=False)
            pid = re.search(r"pid=(\d+)", done.stderr)
            if pid is None:
                raise SystemExit(f"no control master for host {access.host}")
            found.append(psutil.Process(int(pid.group(1))))
        return found

    def sessions(self) -> list[psutil.Process]:
        """The sshd processes serving the masters' connections (the hosts' side)."""
        assert self.sshd is not None
        return psutil.Process(self.sshd.pid).children(recursive=True)

    def run(self) -> dict[str, object]:
        env = {**self.env, "FM_HOME": str(self.primary.root)}
        arm = subprocess.Popen([sys.executable, "-m", "firstmate", "arm"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
        try:
            status = read_line(arm, DEADLINE)
            if not status.startswith("watcher: started"):
                raise SystemExit(f"unexpected arm status: {status!r}")
            arm_p = psutil.Process(arm.pid)
            [watcher] = arm_p.children()
            start = time.monotonic()
            want = HOSTS * CREWS
            while self.busy() < want:
                if time.monotonic() - start > DEADLINE:
                    raise SystemExit(f"only {self.busy()} of {want} panes were read busy")
                if arm.poll() is not None:
                    raise SystemExit(f"the arm ended: {arm.stdout.read() if arm.stdout else ''}")
                time.sleep(0.5)
            first_pass = time.monotonic() - start
            first_lists = self.lists()
            first_cpu = own_seconds(watcher) + reaped_seconds(watcher)
            time.sleep(2.0)  # (the last state file is written just before the pass ends)
            masters, sessions = self.masters(), self.sessions()
            sleeper = subprocess.Popen(["sleep", str(int(IDLE) + 60)])
            base = psutil.Process(sleeper.pid)
            parts = {
                "arm": lambda: own_seconds(arm_p) + reaped_seconds(arm_p),
                "watcher": lambda: own_seconds(watcher),
                "ssh_clients": lambda: reaped_seconds(watcher),
                "ssh_masters": lambda: sum(own_seconds(p) for p in masters),
                "hosts_sshd": lambda: sum(own_seconds(p) + reaped_seconds(p) for p in sessions
                                          if p.is_running()),
                "hosts_tmux": lambda: sum(own_seconds(p) for p in self.servers),
                "sleep": lambda: own_seconds(base)}
            lists_before = self.lists()
            before = {name: read() for name, read in parts.items()}
            t0 = time.monotonic()
            time.sleep(IDLE)
            after = {name: read() for name, read in parts.items()}
            wall = time.monotonic() - t0
            lists = {h: n - lists_before[h] for h, n in self.lists().items()}
            sleeper.kill()
            sleeper.wait()
            if arm.poll() is not None:
                raise SystemExit("the arm ended during the idle window")
        finally:
            if arm.poll() is None:
                for child in psutil.Process(arm.pid).children(recursive=True):
                    child.kill()
                arm.kill()
                arm.wait()
        used = {name: 100 * (after[name] - before[name]) / wall for name in parts}
        primary_side = used["arm"] + used["watcher"] + used["ssh_clients"] + used["ssh_masters"]
        return {"first_pass_s": round(first_pass, 1), "first_pass_cpu_s": round(first_cpu, 1),
                "first_pass_lists": first_lists,
                "idle_seconds": round(wall, 1), "lists_per_host": lists,
                "polls_expected": round(wall / 15.0, 1),
                **{f"{name}_cpu_pct": round(v, 3) for name, v in used.items()},
                "primary_side_cpu_pct": round(primary_side, 3),
                "cpu_resolution_pct": round(100 / os.sysconf("SC_CLK_TCK") / wall, 3)}

    def close(self) -> None:
        from firstmate.fleet import sshhosts

        for access in sshhosts.every(self.primary, self.env) if hasattr(self, "primary") else []:
            sshhosts.close(self.primary, self.env, access)
        for host in self.hosts:
            subprocess.run(["tmux", "-S", str(self.tmp / f"{host}.tmux"), "kill-server"],
                           capture_output=True, check=False)
        if self.sshd is not None:
            self.sshd.terminate()
            self.sshd.wait(30)


def main() -> int:
    if shutil.which("tmux") is None:
        raise SystemExit("bench/fleet_ssh.py needs a tmux binary")
    tmp = Path(tempfile.mkdtemp(prefix="fm-ssh-"))
    os.environ["FIRSTMATE_KEYS_DIR"] = str(tmp / "keys")
    bench = Bench(tmp)
    print(f"fleet over ssh: {HOSTS} hosts x {CREWS} busy crews read by one primary through one "
          f"ssh connection per host (goal: the primary's side <= {GOAL_IDLE_PCT:g} % of a core "
          "idle)", flush=True)
    try:
        started = time.monotonic()
        bench.setup()
        print(f"set up in {time.monotonic() - started:.1f} s", flush=True)
        row = bench.run()
    finally:
        bench.close()
        if not os.environ.get("FM_BENCH_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"first look: every pane read once in {row['first_pass_s']} s "
          f"({row['first_pass_cpu_s']} s of the watcher's and its ssh clients' CPU)")
    print(f"idle over {row['idle_seconds']} s: arm {row['arm_cpu_pct']:.2f} %, watcher "
          f"{row['watcher_cpu_pct']:.2f} %, ssh clients {row['ssh_clients_cpu_pct']:.2f} %, "
          f"control masters {row['ssh_masters_cpu_pct']:.2f} % (the primary's side "
          f"{row['primary_side_cpu_pct']:.2f} % of a core); the hosts' side: sshd "
          f"{row['hosts_sshd_cpu_pct']:.2f} %, tmux {row['hosts_tmux_cpu_pct']:.2f} %; sleep "
          f"{row['sleep_cpu_pct']:.2f} %")
    print(f"list-panes per host in the window: {row['lists_per_host']} (one per look; "
          f"FM_POLL 15 s: ~{row['polls_expected']} looks)")
    meets = float(row["primary_side_cpu_pct"]) <= GOAL_IDLE_PCT  # type: ignore[arg-type]
    print("goals " + ("held" if meets else "BROKEN"))
    emit("fleet_ssh", {"bench": "fleet-ssh", "hosts": HOSTS, "crews_per_host": CREWS, **row,
                       "goal_idle_pct": GOAL_IDLE_PCT, "meets_goal": meets})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
