"""Shared helpers for the chaos, hostile-state and fuzz suites.

Real processes, real signals, real SQLite. Nothing here sleeps to synchronise: waits are on a
process exit or a pipe line, bounded by a generous deadline. The only sleeps are chaos *pacing*
(how long to let a process run before a fault is injected), which is the point of the suite.

The :class:`Audit` installs test-only triggers into the home's database so every insert, claim,
delete, episode write and delivery record lands, inside the writing transaction, in one ordered
log table. The suites' own ledgers (what the producers were told, what the drains presented,
what the acknowledgements reported) are checked against it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import attrs
from firstmate.store.database import open_store
from firstmate.store.home import Home
from firstmate.store.identity import ProcessIdentity, matches, signal_verified
from firstmate.store.locks import FileLock
from firstmate.testing.procs import eventually

CORE = str(Path(__file__).resolve().parents[2] / "core")
#: "Eventually" bound for every wait: generous for a loaded two-core machine.
DEADLINE = 60.0
#: Exit statuses docs/cli.md documents for `fm wake` and `fm arm` (signals: 129/130/143).
DOCUMENTED = frozenset({0, 1, 2, 3, 4, 129, 130, 143})


def base_env(home_root: Path, **extra: str) -> dict[str, str]:
    """A child environment: this checkout's core, the home, quiet plugins, no heartbeat rows."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FM_", "FIRSTMATE_")) or k == "FIRSTMATE_KEYS_DIR"}
    env.update({
        "PYTHONPATH": os.pathsep.join(
            [CORE, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]),
        "FM_HOME": str(home_root),
        "FIRSTMATE_PLUGINS": "none",
        "FM_SIGNAL_GRACE": "0",
        "FM_TMUX": str(home_root.parent / "no-tmux"),
        # The watcher's own sources must never append a row the ledger does not know about.
        "FM_HEARTBEAT": "1000000",
        "FM_HEARTBEAT_MAX": "1000000",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    env.update(extra)
    return env


def fm_argv(*args: str | bytes) -> list[str | bytes]:
    return [sys.executable, "-m", "firstmate", *args]


def run_fm(env: Mapping[str, str], *args: str | bytes, stdin: bytes | None = None,
           timeout: float = DEADLINE) -> subprocess.CompletedProcess[bytes]:
    """Run ``fm ARGS…`` to completion (bytes in, bytes out)."""
    return subprocess.run(fm_argv(*args), input=stdin if stdin is not None else b"",
                          capture_output=True, env=dict(env), timeout=timeout, check=False)


def one_line_error(done: subprocess.CompletedProcess[bytes]) -> str:
    """The single stderr line of a failed command; fails when there is a traceback or more."""
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    assert "internal error" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one stderr line, got {lines!r}"
    return lines[0]


# --- spawned processes ---------------------------------------------------------------------


@attrs.define(eq=False)
class Proc:
    """A spawned process with stdout and stderr in files (read once it has exited)."""

    role: str
    popen: subprocess.Popen[bytes]
    out_path: Path
    err_path: Path
    started: float
    argv: tuple[str, ...]
    #: Signals the test sent, in order.
    signals: list[str] = attrs.Factory(list)
    _lock: threading.Lock = attrs.Factory(threading.Lock)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def send(self, sig: signal.Signals) -> bool:
        """Signal the process (never a reaped pid: Popen refuses once it has the status)."""
        with self._lock:
            if self.popen.poll() is not None:
                return False
            # Recorded first: whoever reaps the process may look before this call returns.
            self.signals.append(sig.name)
            try:
                self.popen.send_signal(sig)
            except OSError:
                self.signals.pop()
                return False
            return True

    def wait(self, deadline: float = DEADLINE) -> int:
        return self.popen.wait(timeout=deadline)

    def stdout(self) -> str:
        return _read(self.out_path)

    def stderr(self) -> str:
        return _read(self.err_path)

    def killed_by_test(self) -> bool:
        with self._lock:
            return bool(self.signals)

    def describe(self) -> str:
        return (f"{self.role} pid={self.pid} argv={list(self.argv)} rc={self.popen.returncode} "
                f"signals={self.signals} stdout={self.stdout()[-600:]!r} "
                f"stderr={self.stderr()[-600:]!r}")


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""


@attrs.define(eq=False)
class Spawner:
    """Starts processes whose output goes to numbered files in one directory."""

    env: dict[str, str]
    logdir: Path
    procs: list[Proc] = attrs.Factory(list)
    _count: int = 0
    _lock: threading.Lock = attrs.Factory(threading.Lock)

    def spawn(self, role: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Proc:
        with self._lock:
            self._count += 1
            number = self._count
        out_path = self.logdir / f"{number:05d}-{role}.out"
        err_path = self.logdir / f"{number:05d}-{role}.err"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            popen = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=err, env={**self.env, **(env or {})})
        proc = Proc(role, popen, out_path, err_path, time.monotonic(), tuple(argv))
        with self._lock:
            self.procs.append(proc)
        return proc

    def fm(self, role: str, *args: str, env: Mapping[str, str] | None = None) -> Proc:
        return self.spawn(role, [str(a) for a in fm_argv(*args)], env)

    def reap_all(self) -> None:
        """CONT and KILL everything still running, and wait for it."""
        for proc in list(self.procs):
            if proc.alive():
                with contextlib.suppress(OSError):
                    proc.popen.send_signal(signal.SIGCONT)
                    proc.popen.kill()
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                proc.popen.wait(timeout=DEADLINE)


# --- the watcher of a home -----------------------------------------------------------------


def watcher_identity(home: Home) -> ProcessIdentity | None:
    """The verified holder of the home's watcher singleton, or None."""
    path = home.lock_path("watch")
    if not path.exists():
        return None
    record = FileLock(path, "watcher", home.root).holder()
    if record is None or not record.verified:
        return None
    return ProcessIdentity.parse(record.identity)


def stop_watcher(home: Home, sig: signal.Signals = signal.SIGKILL) -> None:
    """CONT then *sig* the verified watcher of *home* (never a reused pid); wait for it to go."""
    ident = watcher_identity(home)
    if ident is None:
        return
    signal_verified(ident, signal.SIGCONT)
    signal_verified(ident, sig)
    eventually(f"watcher {ident.pid} to end on {sig.name}", lambda: not matches(ident), DEADLINE,
               interval=0.02)


def lock_states(home: Home) -> dict[str, tuple[str, int | None]]:
    """Every kernel lock file in ``state/``: (holder state, holder pid)."""
    states: dict[str, tuple[str, int | None]] = {}
    for path in sorted(home.state.glob("*.lock")):
        if path.name == "session.lock":  # a durable owner record, not a kernel lock
            continue
        lock = FileLock(path, "probe", home.root)
        record = lock.holder()
        states[path.name] = (lock.holder_state(), record.known_pid if record else None)
    return states


# --- the audit log -------------------------------------------------------------------------

_AUDIT_SQL = """
CREATE TABLE IF NOT EXISTS chaos_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT, what TEXT NOT NULL, seq, key, claim, status, kind,
    generation, reason
);
CREATE TRIGGER IF NOT EXISTS chaos_wake_insert AFTER INSERT ON wakes BEGIN
    INSERT INTO chaos_log (what, seq, key, claim, kind)
    VALUES ('insert', NEW.seq, NEW.key, NEW.claim, NEW.kind);
END;
CREATE TRIGGER IF NOT EXISTS chaos_wake_delete AFTER DELETE ON wakes BEGIN
    INSERT INTO chaos_log (what, seq, key, claim) VALUES ('delete', OLD.seq, OLD.key, OLD.claim);
END;
CREATE TRIGGER IF NOT EXISTS chaos_wake_claim AFTER UPDATE OF claim ON wakes
WHEN OLD.claim IS NOT NEW.claim BEGIN
    INSERT INTO chaos_log (what, seq, key, claim, status)
    VALUES ('claim', NEW.seq, NEW.key, NEW.claim, OLD.claim);
END;
CREATE TRIGGER IF NOT EXISTS chaos_episode_insert AFTER INSERT ON episode BEGIN
    INSERT INTO chaos_log (what, status, kind, generation)
    VALUES ('episode', NEW.status, NEW.kind, NEW.generation);
END;
CREATE TRIGGER IF NOT EXISTS chaos_episode_update AFTER UPDATE ON episode BEGIN
    INSERT INTO chaos_log (what, status, kind, generation)
    VALUES ('episode', NEW.status, NEW.kind, NEW.generation);
END;
CREATE TRIGGER IF NOT EXISTS chaos_delivery AFTER INSERT ON deliveries BEGIN
    INSERT INTO chaos_log (what, seq, reason) VALUES ('delivery', NEW.watcher_pid, NEW.reason);
END;
"""


@attrs.frozen
class Entry:
    id: int
    what: str
    seq: int | None
    key: str | None
    claim: str | None
    status: str | None
    kind: str | None
    generation: str | None
    reason: str | None


@attrs.define(eq=False)
class Audit:
    """The ordered log of every durable change the triggers saw (read incrementally)."""

    home: Home
    last_id: int = 0

    @classmethod
    def install(cls, home: Home) -> Audit:
        open_store(home).close()  # schema first: the triggers hang off its tables
        with contextlib.closing(sqlite3.connect(str(home.db), timeout=60)) as conn:
            conn.executescript(_AUDIT_SQL)
            conn.commit()
        return cls(home)

    @contextlib.contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(str(self.home.db), timeout=60, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()

    def new(self) -> list[Entry]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT id, what, seq, key, claim, status, kind, generation, reason FROM chaos_log"
                " WHERE id > ? ORDER BY id", (self.last_id,)).fetchall()
        entries = [Entry(*row) for row in rows]
        if entries:
            self.last_id = entries[-1].id
        return entries

    def queued(self) -> list[tuple[int, str, str | None]]:
        """(seq, key, claim) of every row still queued."""
        with self._conn() as conn:
            return [(int(s), str(k), c) for s, k, c in
                    conn.execute("SELECT seq, key, claim FROM wakes ORDER BY seq")]

    def unclaimed(self, kinds: Sequence[str], limit: int) -> list[int]:
        marks = ",".join("?" * len(kinds))
        with self._conn() as conn:
            return [int(r[0]) for r in conn.execute(
                f"SELECT seq FROM wakes WHERE claim IS NULL AND kind IN ({marks})"
                " ORDER BY seq DESC LIMIT ?", (*kinds, limit))]


__all__ = [
    "CORE",
    "DEADLINE",
    "DOCUMENTED",
    "Audit",
    "Entry",
    "Proc",
    "Spawner",
    "base_env",
    "fm_argv",
    "lock_states",
    "one_line_error",
    "run_fm",
    "stop_watcher",
    "watcher_identity",
]
