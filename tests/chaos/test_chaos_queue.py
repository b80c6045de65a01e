"""Chaos: the wake queue, watcher and arm under random SIGKILL / SIGSTOP / SIGTERM.

Producers append all the time (``fm wake append`` processes and a process calling
``queue.append`` directly) while a seeded random schedule starts arms, drains and acknowledges
as main and as a supervision branch, and kills or stops watchers, arms, drains,
acknowledgements and producers at random points. After every step the test checks:

* every appended wake is inserted once under one sequence number, presented only to the actor
  that holds it, never presented after its acknowledgement, and deleted exactly once — by an
  acknowledgement of the actor it was presented to; a successful acknowledgement consumed exactly
  the presented rows at or below its cutoff (its ``consumed`` count and the rows agree); a
  successful drain presented every row its actor holds; a row never changes owner;
* no arm exits 0 without a reason line; every other end is a ``watcher: FAILED`` line or a
  signal the test sent; no process prints a traceback;
* a recovery generation is announced at most once, plus once more per documented reopening
  (``announced:handling:G`` → ``pending:downtime:G``, docs/state.md), and each announcement
  is delivered as ``check: rearm-resurface`` by at most one watcher;

and at every quiescence point that no lock file in ``state/`` is held by a dead or unverifiable
process. At the end everything appended is acknowledged and the queue is empty.

``FM_CHAOS_CYCLES`` (default 60) sets the number of steps, ``FM_CHAOS_SEED`` replays a schedule
(the decisions replay exactly; the operating system's timing does not). The seed is printed with
every failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest
from chaos_support import (
    DEADLINE,
    Audit,
    Entry,
    Proc,
    Spawner,
    base_env,
    lock_states,
    stop_watcher,
    watcher_identity,
)
from firstmate.continuity.watchchild import REASON_RE
from firstmate.store import queue
from firstmate.store.home import Home
from firstmate.store.identity import ProcessIdentity, signal_verified

pytestmark = pytest.mark.slow

CYCLES = int(os.environ.get("FM_CHAOS_CYCLES", "") or 60)
SEED = int(os.environ.get("FM_CHAOS_SEED", "") or random.SystemRandom().randrange(2**32))
#: A quiescence point (producers paused, stopped processes resumed, locks inspected) every N steps.
QUIESCE_EVERY = 25
KINDS = ("signal", "stale", "check")
#: Hostile tails for producer payloads: escapes, controls, breaks, non-ASCII.
TAILS = ("", " \x1b[31mred\x1b[0m", " tab\there", " ünï ✓", " line\u2028break", " bell\x07",
         " osc\x1b]0;title\x07", " c1\x9b2J", " nul-free\x7f")

API_PRODUCER = r"""
import os, random, sys, time
from firstmate.store import queue
from firstmate.store.home import open_home
from firstmate.store.database import open_store
prefix, pause, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
db = open_store(open_home(os.environ))
kinds = ("signal", "stale", "check")
i = 0
while True:
    i += 1
    kind = kinds[i % 3]
    key = f"{prefix}-{i}"
    print("try", kind, key, flush=True)
    seq = queue.append(db, kind, key, f"{kind}: api wake {key}")
    print("done", key, seq, flush=True)
    time.sleep(rng.random() * pause)
"""

OWNER = "import sys; print('ready', flush=True); sys.stdin.read()"


class Violation(AssertionError):
    pass


# --- the ledger ----------------------------------------------------------------------------


@attrs.define(eq=False)
class Ledger:
    """What the test knows happened, checked against the audit log entry by entry."""

    lock: threading.Lock = attrs.Factory(threading.Lock)
    #: key -> the payload a drain must show (cleaned) for every append ever attempted.
    attempted: dict[str, str] = attrs.Factory(dict)
    #: key -> sequence number an append reported (its process exited 0 and printed it).
    definite: dict[str, int] = attrs.Factory(dict)
    #: keys whose append was interrupted: inserted once or never.
    maybe: set[str] = attrs.Factory(set)
    inserted: dict[int, str] = attrs.Factory(dict)
    inserted_keys: dict[str, int] = attrs.Factory(dict)
    deleted: dict[int, str | None] = attrs.Factory(dict)
    #: seq -> current claim (only for rows still queued).
    claim: dict[int, str | None] = attrs.Factory(dict)
    presented: dict[str, set[int]] = attrs.Factory(lambda: {"main": set(), "branch": set()})
    #: episode bookkeeping
    previous: tuple[str | None, str | None, str | None] | None = None
    announced: Counter[str] = attrs.Factory(Counter)
    reopened: Counter[str] = attrs.Factory(Counter)
    announcement: str | None = None
    announcement_delivered: bool = False
    resurfaces: int = 0
    problems: list[str] = attrs.Factory(list)

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def attempt(self, key: str, payload: str) -> None:
        with self.lock:
            self.attempted[key] = queue.clean(payload, queue.PAYLOAD_MAX)

    def settle(self, key: str, seq: int | None) -> None:
        with self.lock:
            if seq is None:
                self.maybe.add(key)
            else:
                self.definite[key] = seq

    def apply(self, entries: list[Entry]) -> list[Entry]:
        for e in entries:
            if e.what == "insert":
                assert e.seq is not None and e.key is not None
                if e.seq in self.inserted or e.seq in self.deleted:
                    self.problem(f"sequence {e.seq} reused (key {e.key})")
                if e.key in self.inserted_keys:
                    self.problem(f"key {e.key} inserted twice (seq {self.inserted_keys[e.key]} "
                                 f"and {e.seq}): a duplicated append")
                self.inserted[e.seq] = e.key
                self.inserted_keys[e.key] = e.seq
                self.claim[e.seq] = e.claim
            elif e.what == "claim":
                assert e.seq is not None
                before = e.status  # the trigger stores OLD.claim there
                if before is not None:
                    self.problem(f"row {e.seq} changed owner from {before} to {e.claim}")
                self.claim[e.seq] = e.claim
            elif e.what == "delete":
                assert e.seq is not None
                if e.seq not in self.inserted:
                    self.problem(f"row {e.seq} deleted but never inserted")
                if e.seq in self.deleted:
                    self.problem(f"row {e.seq} deleted twice")
                actor = e.claim
                if actor not in ("main", "branch"):
                    self.problem(f"row {e.seq} deleted while unowned (claim {actor!r})")
                elif e.seq not in self.presented[actor]:
                    self.problem(f"row {e.seq} acknowledged by {actor} without being presented "
                                 "to it")
                self.deleted[e.seq] = actor
                self.claim.pop(e.seq, None)
            elif e.what == "episode":
                self._episode(e)
            elif e.what == "delivery" and e.reason == "check: rearm-resurface":
                self.resurfaces += 1
                if self.announcement is None:
                    self.problem("check: rearm-resurface delivered without an announcement")
                elif self.announcement_delivered:
                    self.problem(f"announcement of generation {self.announcement} delivered "
                                 "as check: rearm-resurface twice")
                self.announcement_delivered = True
        return entries

    def _episode(self, e: Entry) -> None:
        now = (e.status, e.kind, e.generation)
        before = self.previous
        gen = e.generation or ""
        if before == ("announced", "handling", gen) and now == ("pending", "downtime", gen):
            self.reopened[gen] += 1  # the documented reopening: one more announcement is owed
        if e.status == "announced" and not (before and before[0] == "announced"
                                            and before[2] == gen):
            self.announced[gen] += 1
            self.announcement, self.announcement_delivered = gen, False
            if self.announced[gen] > 1 + self.reopened[gen]:
                self.problem(f"generation {gen} announced {self.announced[gen]} times with "
                             f"{self.reopened[gen]} reopening(s)")
        self.previous = now

    def holding(self, actor: str) -> set[int]:
        return {s for s, c in self.claim.items() if c == actor}


# --- fault injection -----------------------------------------------------------------------


@attrs.define(eq=False)
class Faults:
    """SIGSTOPs are always followed, after a random pause, by SIGCONT or SIGKILL (a timer)."""

    rng: random.Random
    lock: threading.Lock = attrs.Factory(threading.Lock)
    pending: list[tuple[threading.Timer, Callable[[signal.Signals], object]]] = attrs.Factory(list)
    count: Counter[str] = attrs.Factory(Counter)
    #: Processes stopped for good (wedged): resumed only by settle.
    forever: list[Callable[[signal.Signals], object]] = attrs.Factory(list)

    def hit(self, label: str, send: Callable[[signal.Signals], object], sig: signal.Signals,
            rng: random.Random | None = None, *, forever: bool = False) -> None:
        """Send *sig*. A SIGSTOP is followed by SIGCONT or SIGKILL after a random pause, unless
        *forever* (a wedged process: only a replacement, or the final settle, ends it)."""
        rng = rng or self.rng
        with self.lock:
            self.count[f"{label}:{sig.name}{'-forever' if forever else ''}"] += 1
        if not send(sig) or sig != signal.SIGSTOP:
            return
        if forever:
            with self.lock:
                self.forever.append(send)
            return
        follow = signal.SIGCONT if rng.random() < 0.65 else signal.SIGKILL
        timer = threading.Timer(rng.uniform(0.05, 0.8), send, (follow,))
        timer.daemon = True
        with self.lock:
            self.pending.append((timer, send))
        timer.start()

    def settle(self) -> None:
        """Resume everything still stopped (cancelled follow-ups become SIGCONT now)."""
        with self.lock:
            pending, self.pending = self.pending, []
            forever, self.forever = self.forever, []
        for timer, send in pending:
            timer.cancel()
            timer.join()
            with contextlib.suppress(Exception):
                send(signal.SIGCONT)
        for send in forever:
            with contextlib.suppress(Exception):
                send(signal.SIGCONT)


def proc_sender(proc: Proc) -> Callable[[signal.Signals], bool]:
    return proc.send


def identity_sender(ident: ProcessIdentity) -> Callable[[signal.Signals], bool]:
    return lambda sig: signal_verified(ident, sig)


# --- the run -------------------------------------------------------------------------------


@attrs.define(eq=False)
class Chaos:
    home: Home
    tmp: Path
    rng: random.Random
    spawner: Spawner
    audit: Audit
    ledger: Ledger = attrs.Factory(Ledger)
    faults: Faults = attrs.field(default=None)
    arms: list[Proc] = attrs.Factory(list)
    finished_arms: int = 0
    arm_outcomes: Counter[str] = attrs.Factory(Counter)
    stop_producers: threading.Event = attrs.Factory(threading.Event)
    producers: list[threading.Thread] = attrs.Factory(list)
    api: Proc | None = None
    api_lock: threading.Lock = attrs.Factory(threading.Lock)
    owner: subprocess.Popen[bytes] | None = None
    grant_gen: str | None = None
    durations: dict[str, list[float]] = attrs.Factory(dict)
    outcomes: Counter[str] = attrs.Factory(Counter)
    resolved_processes: set[int] = attrs.Factory(set)
    epoch: int = 0
    last_skip: str = ""

    def __attrs_post_init__(self) -> None:
        if self.faults is None:
            self.faults = Faults(random.Random(self.rng.random()))

    # --- checks ------------------------------------------------------------------------------

    def sync(self) -> list[Entry]:
        return self.ledger.apply(self.audit.new())

    def verify(self, where: str) -> None:
        self.reap_arms()
        self.check_outputs()
        self.sync()
        if self.ledger.problems:
            raise Violation(f"after {where}: " + "; ".join(self.ledger.problems[:10]))

    def check_outputs(self) -> None:
        """No process of ours printed a traceback or an internal error."""
        for proc in list(self.spawner.procs):
            if proc.pid in self.resolved_processes or proc.alive():
                continue
            self.resolved_processes.add(proc.pid)
            err = proc.stderr()
            if "Traceback" in err or "internal error" in err:
                self.ledger.problem(f"traceback from {proc.describe()}")

    def reap_arms(self) -> None:
        for arm in list(self.arms):
            if arm.alive():
                continue
            self.arms.remove(arm)
            self.finished_arms += 1
            self.check_arm(arm)

    def check_arm(self, arm: Proc) -> None:
        rc = arm.popen.returncode
        lines = [line for line in arm.stdout().splitlines() if line.strip()]
        reasons = [line for line in lines if REASON_RE.match(line)]
        failed = [line for line in lines if line.startswith("watcher: FAILED - ")]
        mode = arm.argv[4] if len(arm.argv) > 4 else "arm"
        self.arm_outcomes[f"{mode}:{rc}"] += 1
        if rc == 0:
            if mode == "--stop":
                ok = lines and lines[-1].startswith(("watcher: stopped pid=", "watcher: none running"))
            else:
                ok = bool(reasons) and REASON_RE.match(lines[-1]) is not None
            if not ok:
                self.ledger.problem(f"arm exited 0 without a reason line: {arm.describe()}")
            if len(reasons) > 1:
                self.ledger.problem(f"arm printed {len(reasons)} reason lines: {arm.describe()}")
        elif rc < 0:
            if not arm.killed_by_test():
                self.ledger.problem(f"arm died of signal {-rc} nobody sent: {arm.describe()}")
        elif rc in (129, 130, 143):
            if "SIGTERM" not in arm.signals and "SIGINT" not in arm.signals \
                    and "SIGHUP" not in arm.signals:
                self.ledger.problem(f"arm exited {rc} without being signalled: {arm.describe()}")
            if not (failed or reasons):
                self.ledger.problem(f"interrupted arm printed no line: {arm.describe()}")
        elif rc in (1, 3, 4):
            if not failed:
                self.ledger.problem(f"arm exited {rc} without a FAILED line: {arm.describe()}")
        else:
            self.ledger.problem(f"arm exited with undocumented status {rc}: {arm.describe()}")

    # --- producers ---------------------------------------------------------------------------

    def start_producers(self) -> None:
        self.stop_producers.clear()
        self.epoch += 1
        for number in range(2):
            rng = random.Random(self.rng.random())
            thread = threading.Thread(target=self.cli_producer,
                                      args=(f"cli{number}e{self.epoch}", rng), daemon=True)
            thread.start()
            self.producers.append(thread)
        api = threading.Thread(target=self.api_producer,
                               args=(f"api{self.epoch}", random.Random(self.rng.random())),
                               daemon=True)
        api.start()
        self.producers.append(api)

    def halt_producers(self) -> None:
        self.stop_producers.set()
        with self.api_lock:
            if self.api is not None:
                self.api.send(signal.SIGKILL)
        for thread in self.producers:
            thread.join(DEADLINE)
            if thread.is_alive():
                raise Violation("a producer did not stop")
        self.producers.clear()

    def cli_producer(self, tag: str, rng: random.Random) -> None:
        count = 0
        while not self.stop_producers.is_set():
            count += 1
            kind = rng.choice(KINDS)
            key = f"{tag}-{count}"
            payload = f"{kind}: cli wake {key}{rng.choice(TAILS)}"
            self.ledger.attempt(key, payload)
            proc = self.spawner.fm("append", "wake", "append", kind, key, payload)
            if rng.random() < 0.2:
                time.sleep(rng.uniform(0.0, 0.6))
                self.faults.hit("producer", proc_sender(proc),
                                rng.choice([signal.SIGKILL, signal.SIGSTOP]), rng)
            try:
                rc = proc.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                self.ledger.problem(f"append hung: {proc.describe()}")
                proc.send(signal.SIGKILL)
                rc = proc.wait(DEADLINE)
            out = proc.stdout().strip()
            if rc == 0 and out.isdigit():
                self.ledger.settle(key, int(out))
            elif proc.killed_by_test():
                self.ledger.settle(key, None)
            else:
                self.ledger.settle(key, None)
                self.ledger.problem(f"append failed: {proc.describe()}")

    def api_producer(self, tag: str, rng: random.Random) -> None:
        round_ = 0
        while not self.stop_producers.is_set():
            round_ += 1
            prefix = f"{tag}r{round_}"
            err = self.tmp / "logs" / f"{prefix}.err"
            with open(err, "wb") as err_file:
                popen = subprocess.Popen(
                    [sys.executable, "-c", API_PRODUCER, prefix, "0.15",
                     str(rng.randrange(2**31))],
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err_file,
                    env=self.spawner.env)
            proc = Proc("api", popen, err, err, time.monotonic(), ("api", prefix))
            with self.api_lock:
                self.api = proc
                if self.stop_producers.is_set():  # halted while this one was starting
                    proc.send(signal.SIGKILL)
            assert popen.stdout is not None
            trying: str | None = None
            for raw in popen.stdout:
                parts = raw.decode().split()
                if parts[:1] == ["try"]:
                    trying = parts[2]
                    self.ledger.attempt(trying, f"{parts[1]}: api wake {trying}")
                elif parts[:1] == ["done"]:
                    self.ledger.settle(parts[1], int(parts[2]))
                    trying = None
            popen.wait()
            popen.stdout.close()
            if trying is not None:
                self.ledger.settle(trying, None)
            if not proc.killed_by_test() or "Traceback" in proc.stderr():
                self.ledger.problem(f"API producer died by itself: {proc.describe()}")
            with self.api_lock:
                self.api = None

    # --- steps ---------------------------------------------------------------------------------

    def timed(self, name: str, proc: Proc, fault: float) -> tuple[int, bool]:
        """Wait for *proc*; with probability *fault* hit it with KILL or STOP at a random point
        of its usual run time. Returns (exit status, whether a fault was injected)."""
        hit = self.rng.random() < fault
        if hit:
            seen = sorted(self.durations.get(name, [])) or [0.5]
            typical = seen[len(seen) // 2]
            time.sleep(self.rng.uniform(0.2, 1.1) * typical)
            self.faults.hit(name, proc_sender(proc),
                            self.rng.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGSTOP]))
        try:
            rc = proc.wait(DEADLINE)
        except subprocess.TimeoutExpired as exc:
            raise Violation(f"{name} hung for {DEADLINE}s: {proc.describe()} "
                            f"locks={lock_states(self.home)}") from exc
        if not proc.signals:
            self.durations.setdefault(name, []).append(time.monotonic() - proc.started)
        self.outcomes[f"{name}:{'fault' if proc.signals else rc}"] += 1
        return rc, bool(proc.signals)

    def step_arm(self) -> None:
        if len(self.arms) >= 3:
            return self.step_arm_fault()
        roll = self.rng.random()
        args: list[str] = []
        if roll < 0.08:
            args = ["--restart"]
        elif roll < 0.16:
            target = self.rng.choice(self.arms) if self.arms else None
            args = ["--take-over"] + ([str(target.pid)] if target and self.rng.random() < 0.7 else [])
        elif roll < 0.20:
            args = ["--stop"]
        self.arms.append(self.spawner.fm("arm", "arm", *args, env={"FM_ARM_CONFIRM_TIMEOUT": "5"}))
        time.sleep(self.rng.uniform(0.05, 0.4))
        return None

    def step_arm_fault(self) -> None:
        live = [a for a in self.arms if a.alive()]
        if not live:
            return self.step_arm()
        arm = self.rng.choice(live)
        sig = self.rng.choice([signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM])
        self.faults.hit("arm", proc_sender(arm), sig)
        time.sleep(self.rng.uniform(0.05, 0.3))
        return None

    def step_watcher_fault(self) -> None:
        ident = watcher_identity(self.home)
        if ident is None:
            if not any(arm.alive() for arm in self.arms):
                self.step_arm()
            end = time.monotonic() + 3.0  # a watcher is usually starting: catch it
            while ident is None and time.monotonic() < end:
                time.sleep(0.05)
                ident = watcher_identity(self.home)
            if ident is None:
                return
        time.sleep(self.rng.uniform(0.0, 0.3))  # early, mid-poll or while closing
        if self.rng.random() < 0.15:
            # Wedged: alive, holding the lock, never polling again. The next re-arm past the
            # stall bound must replace it; the rows queued meanwhile are still delivered once.
            self.faults.hit("watcher", identity_sender(ident), signal.SIGSTOP, forever=True)
            time.sleep(self.rng.uniform(0.05, 0.3))
            return
        sig = self.rng.choice([signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM])
        self.faults.hit("watcher", identity_sender(ident), sig)
        time.sleep(self.rng.uniform(0.05, 0.3))

    def step_api_fault(self) -> None:
        with self.api_lock:
            api = self.api
        if api is not None:
            self.faults.hit("api", proc_sender(api), self.rng.choice([signal.SIGKILL,
                                                                      signal.SIGSTOP]))
        time.sleep(self.rng.uniform(0.05, 0.2))

    def drain(self, actor: str, fault: float, bound: str | None = None) -> dict[str, object] | None:
        """One drain as *actor*; its JSON when it completed, after checking what it showed."""
        self.sync()
        gone_before = set(self.ledger.deleted)
        env = {"FM_STATUS_PRESENTATION_LOCK_TIMEOUT": bound or self.rng.choice(["1", "10"])}
        args = ["wake", "drain", "--json"] + (["--actor", "branch"] if actor == "branch" else [])
        proc = self.spawner.fm(f"drain-{actor}", *args, env=env)
        rc, hit = self.timed(f"drain-{actor}", proc, fault)
        self.sync()
        if hit and rc != 0:
            return None
        if rc != 0:
            raise Violation(f"drain failed: {proc.describe()}")
        result = json.loads(proc.stdout())
        if result.get("skipped"):
            self.last_skip = f"{result['skipped']} locks={lock_states(self.home)}"
            return None
        shown = [row for row in result["rows"]]  # type: ignore[union-attr]
        seqs = {int(row["seq"]) for row in shown}
        other = "branch" if actor == "main" else "main"
        for row in shown:
            seq, key = int(row["seq"]), str(row["key"])
            if self.ledger.inserted.get(seq) != key:
                self.ledger.problem(f"drain showed row {seq} with key {key!r}, inserted as "
                                    f"{self.ledger.inserted.get(seq)!r}")
            if seq in gone_before:
                self.ledger.problem(f"drain showed row {seq} after its acknowledgement")
            if seq in self.ledger.presented[other]:
                self.ledger.problem(f"row {seq} presented to both main and branch")
            expected = self.ledger.attempted.get(key)
            if expected is not None and row["payload"] != expected:
                self.ledger.problem(f"row {seq} payload {row['payload']!r} != {expected!r}")
        if seqs != self.ledger.holding(actor):
            self.ledger.problem(f"{actor} drain showed {sorted(seqs)} but {actor} holds "
                                f"{sorted(self.ledger.holding(actor))}")
        self.ledger.presented[actor] |= seqs
        return result

    def ack(self, actor: str, result: dict[str, object], fault: float = 0.35) -> None:
        through, gen = result.get("ack_through"), result.get("generation")
        if through is None or gen is None:
            return
        self.sync()
        expected = {s for s in self.ledger.presented[actor]
                    if s not in self.ledger.deleted and s <= int(str(through))}
        args = ["wake", "drain", "--ack-through", str(through), "--recovery-generation", str(gen),
                "--json"] + (["--actor", "branch"] if actor == "branch" else [])
        proc = self.spawner.fm(f"ack-{actor}", *args)
        rc, hit = self.timed(f"ack-{actor}", proc, fault)
        entries = self.sync()
        consumed = {e.seq for e in entries if e.what == "delete" and e.claim == actor}
        if rc != 0:
            if hit:
                return
            raise Violation(f"acknowledgement failed: {proc.describe()}")
        done = json.loads(proc.stdout())
        if done["consumed"] != len(consumed) or consumed != expected:
            self.ledger.problem(
                f"{actor} ack through {through} reported {done['consumed']} consumed; the log "
                f"shows {sorted(c for c in consumed if c is not None)}; expected "
                f"{sorted(expected)}")

    def step_main(self) -> None:
        result = self.drain("main", 0.35)
        if result is not None and self.rng.random() < 0.9:
            self.ack("main", result)

    def step_branch(self) -> None:
        assert self.owner is not None
        status = json.loads(self.spawner_run("wake", "query", "--json"))
        grant = status.get("grant")
        if not grant:
            self.grant_gen = f"chaos-b{self.rng.randrange(10**6)}"
            proc = self.spawner.fm("grant", "wake", "grant", "activate", str(self.owner.pid),
                                   self.grant_gen)
            rc, hit = self.timed("grant-activate", proc, 0.2)
            if rc != 0 and not hit:
                raise Violation(f"grant activate failed: {proc.describe()}")
            return
        self.grant_gen = str(grant["generation"])
        if not grant.get("rows"):
            seqs = self.audit.unclaimed(("signal", "stale"), self.rng.randint(1, 4))
            if not seqs:
                return
            proc = self.spawner.fm("grant", "wake", "grant", "publish", self.grant_gen,
                                   *map(str, seqs))
            rc, hit = self.timed("grant-publish", proc, 0.2)
            if rc != 0 and not hit:
                raise Violation(f"grant publish failed: {proc.describe()}")
            return
        result = self.drain("branch", 0.3)
        if result is not None and self.rng.random() < 0.9:
            self.ack("branch", result)

    def spawner_run(self, *args: str) -> str:
        proc = self.spawner.fm("query", *args)
        rc = proc.wait(DEADLINE)
        if rc != 0:
            raise Violation(f"fm {' '.join(args)} failed: {proc.describe()}")
        return proc.stdout()

    # --- quiescence ----------------------------------------------------------------------------

    def check_locks(self, where: str) -> None:
        """Every lock in state/ is free or held by a live, identity-verified process."""
        end = time.monotonic() + 10.0
        while True:
            states = lock_states(self.home)
            bad = {name: st for name, st in states.items() if st[0] not in ("free", "held")}
            if not bad:
                return
            if time.monotonic() > end:
                raise Violation(f"after {where}: locks held by dead or unverifiable processes: "
                                f"{bad}")
            time.sleep(0.05)

    def quiesce(self, where: str) -> None:
        self.halt_producers()
        self.faults.settle()
        self.verify(where)
        self.check_locks(where)
        self.start_producers()

    def finish(self) -> None:
        """Stop everything, acknowledge what is left, and check the whole ledger."""
        self.halt_producers()
        self.faults.settle()
        for arm in self.arms:
            arm.send(signal.SIGKILL)
            arm.wait(DEADLINE)
        self.reap_arms()
        stopper = self.spawner.fm("arm", "arm", "--stop")
        self.arms.append(stopper)
        stopper.wait(DEADLINE)
        stop_watcher(self.home)  # a watcher that was still starting when --stop looked
        self.verify("the final stop")
        self.check_locks("the final stop")
        for _ in range(50):
            status = json.loads(self.spawner_run("wake", "query", "--json"))
            grant = status.get("grant")
            if grant and grant.get("rows"):
                result = self.drain("branch", 0.0, "30")
                assert result is not None, f"the branch could not drain: {self.last_skip}"
                self.ack("branch", result, 0.0)
                continue
            if status["depth"] == 0:
                break
            result = self.drain("main", 0.0, "30")
            if result is not None:
                self.ack("main", result, 0.0)
        if grant:
            assert self.owner is not None
            done = self.spawner_run("wake", "grant", "deactivate", str(self.owner.pid),
                                    str(grant["generation"]))
            assert "0 row(s) returned" in done, done
        self.verify("the final acknowledgements")
        self.final_ledger()

    def final_ledger(self) -> None:
        led = self.ledger
        left = self.audit.queued()
        if left:
            led.problem(f"rows left in the queue after the final acknowledgements: {left[:20]}")
        for key, seq in led.definite.items():
            if led.inserted_keys.get(key) != seq:
                led.problem(f"append of {key} reported seq {seq}, the log has "
                            f"{led.inserted_keys.get(key)}")
        for key in led.inserted_keys:
            if key not in led.attempted:
                led.problem(f"row with key {key} was never appended by the test")
        for seq in led.inserted:
            if seq not in led.deleted:
                led.problem(f"row {seq} was never acknowledged")
        both = led.presented["main"] & led.presented["branch"]
        if both:
            led.problem(f"rows presented to both actors: {sorted(both)[:20]}")
        if led.problems:
            raise Violation("at the end: " + "; ".join(led.problems[:10]))

    def summary(self) -> str:
        led = self.ledger
        return (f"seed={SEED} cycles={CYCLES} appended={len(led.inserted)} "
                f"(definite {len(led.definite)}, interrupted {len(led.maybe)}) "
                f"acked main={sum(1 for a in led.deleted.values() if a == 'main')} "
                f"branch={sum(1 for a in led.deleted.values() if a == 'branch')} "
                f"arms={self.finished_arms} {dict(self.arm_outcomes)} "
                f"faults={dict(self.faults.count)} steps={dict(self.outcomes)} "
                f"announcements={sum(led.announced.values())} resurfaces={led.resurfaces}")


@contextlib.contextmanager
def chaos_rig(tmp_path: Path) -> Iterator[Chaos]:
    root = tmp_path / "home"
    home = Home(root).ensure()
    audit = Audit.install(home)
    (tmp_path / "logs").mkdir()
    # A short grace and stall bound, so a wedged watcher is replaced within the run.
    spawner = Spawner(base_env(root, FM_GUARD_GRACE="2", FM_ARM_STALL_BOUND="4",
                               FM_ARM_STALL_PING="1"), tmp_path / "logs")
    chaos = Chaos(home, tmp_path, random.Random(SEED), spawner, audit)
    chaos.owner = subprocess.Popen([sys.executable, "-c", OWNER], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, env=spawner.env)
    assert chaos.owner.stdout is not None and chaos.owner.stdout.readline() == b"ready\n"
    try:
        yield chaos
    finally:
        chaos.stop_producers.set()
        chaos.faults.settle()
        with chaos.api_lock:
            if chaos.api is not None:
                chaos.api.send(signal.SIGKILL)
        spawner.reap_all()
        with contextlib.suppress(Exception):
            stop_watcher(home)
        for thread in chaos.producers:
            thread.join(DEADLINE)
        chaos.owner.kill()
        chaos.owner.wait(DEADLINE)
        for stream in (chaos.owner.stdin, chaos.owner.stdout):
            if stream is not None:
                stream.close()


STEPS: tuple[tuple[str, float], ...] = (
    ("arm", 3.0), ("arm_fault", 2.0), ("watcher_fault", 3.0), ("main", 4.0), ("branch", 2.0),
    ("api_fault", 0.7),
)


# A full run (FM_CHAOS_CYCLES=1000) takes far longer than the suite-wide 300 s timeout.
@pytest.mark.timeout(max(300, 600 + 6 * CYCLES))
def test_every_wake_is_acknowledged_exactly_once_under_kills(tmp_path: Path) -> None:
    print(f"chaos: FM_CHAOS_SEED={SEED} FM_CHAOS_CYCLES={CYCLES}")
    with chaos_rig(tmp_path) as chaos:
        try:
            chaos.start_producers()
            actions = {
                "arm": chaos.step_arm, "arm_fault": chaos.step_arm_fault,
                "watcher_fault": chaos.step_watcher_fault, "main": chaos.step_main,
                "branch": chaos.step_branch, "api_fault": chaos.step_api_fault,
            }
            names = [name for name, _ in STEPS]
            weights = [weight for _, weight in STEPS]
            for cycle in range(1, CYCLES + 1):
                name = chaos.rng.choices(names, weights)[0]
                actions[name]()
                chaos.verify(f"step {cycle} ({name})")
                if cycle % QUIESCE_EVERY == 0:
                    chaos.quiesce(f"quiescence at step {cycle}")
            chaos.finish()
        except AssertionError as exc:
            raise AssertionError(f"[FM_CHAOS_SEED={SEED} FM_CHAOS_CYCLES={CYCLES}] {exc}\n"
                                 f"{chaos.summary()}") from exc
        print("chaos:", chaos.summary())
        assert len(chaos.ledger.inserted) > 0 and chaos.ledger.deleted
