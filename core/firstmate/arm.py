"""The arm: start a watcher cycle (or attach to the live one) and return that cycle's reason.

An arm prints status lines on stdout, one per state change, then the cycle's reason line. It
never returns a clean empty success: it exits 0 only after printing a reason line (``--stop``
and a confirmed ``--handling-delivered`` are the two modes that ask for no cycle). Every other
end prints one ``watcher: FAILED - …`` line and exits non-zero.

Modes (see docs/cli.md for every line and exit status):

``fm arm``
    Attach when a healthy identity-matched watcher exists, else start one: spawn
    ``python -m firstmate watch`` as a tracked child and confirm, within
    ``FM_ARM_CONFIRM_TIMEOUT`` (10 s), that the child is the verified lock holder with a beacon
    of its own. Then relay the child's reason line. A watcher that closes without a delivery is
    followed to its successor for up to ``FM_ARM_SUCCESSOR_CONFIRM_TIMEOUT`` (default: the
    confirmation timeout).
``--restart`` / ``--stop``
    Stop the current identity-verified watcher (TERM, bounded wait); restart then starts a
    fresh cycle. A reused pid is never signalled.
``--take-over [ARM_PID]``
    Stop the watcher the named arm started (from the cycle links in the store) and own a fresh
    cycle. An arm pid that owns no live cycle only attaches.
``--handling-delivered GEN --watcher-pid PID``
    Confirm a continuity handoff: PID must be the live identity-matched watcher; the episode of
    GEN moves to handling.

Waiting is event-driven: the child's stdout and a pidfd (Linux) wake the arm; a one-second tick
(``FM_ARM_ATTACH_POLL``) only checks the arm's ground and the beacon's age.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import TextIO

import attrs

from firstmate import cyclelog, stopsignals
from firstmate.cyclelog import CycleRow, lock_text
from firstmate.envnum import PID_MAX, decimal, env_float
from firstmate.errors import FirstmateError, LockTimeout, UsageError
from firstmate.exitcodes import ExitCode
from firstmate.health import LOCK_NAME, WatcherHealth, watcher_health
from firstmate.home import Home, refuse_symlink, resolve_root
from firstmate.identity import ProcessIdentity
from firstmate.store import Store
from firstmate.watcher import (
    READY_FD_ENV,
    cleanup_lock_bound,
    code_dir,
    disposable_checkout,
    predecessor_arm_pid,
)

USAGE = ("usage: fm arm [--restart | --stop | --take-over [ARM_PID] | "
         "--handling-delivered GEN --watcher-pid PID]")
#: A reason line, as every adapter recognises it.
REASON_RE = re.compile(r"(signal:|stale:|check:|heartbeat($|:))")
DEFAULT_CONFIRM_TIMEOUT = 10.0
#: A verified watcher of ours whose beacon is older than this many graces is wedged
#: (``FM_ARM_STALL_BOUND`` sets the seconds); it is rung, given ``FM_ARM_STALL_PING`` seconds to
#: answer, then replaced.
STALL_GRACES = 2.0
STALL_BOUND_ENV = "FM_ARM_STALL_BOUND"
STALL_PING_ENV = "FM_ARM_STALL_PING"
DEFAULT_STALL_PING = 5.0
#: The queue key of the row announcing a replaced wedged watcher.
REPLACED_KEY = "watcher-replaced"
#: ``state/recover.lock``: one arm at a time replaces a wedged watcher.
RECOVER_LOCK = "recover"
DEFAULT_TICK = 1.0
#: How long a take-over waits for the taken-over arm's cycle row.
TAKEOVER_ROW_WAIT = 2.0
#: Bounded polls on failure paths (waiting for a successor to publish its beacon).
SUCCESSOR_POLL = 0.05
#: Cycle links kept in the store.
LINKS_KEEP = 256


class Interrupted(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum: int, frame: FrameType | None) -> None:
    stopsignals.block()
    raise Interrupted(signum)


# --- arguments -------------------------------------------------------------------------------


@attrs.frozen
class Mode:
    name: str
    arm_pid: int | None = None
    generation: str | None = None
    watcher_pid: int | None = None


def _pid(text: str, what: str) -> int:
    pid = decimal(text, minimum=1, maximum=PID_MAX)
    if pid is None:
        raise UsageError(f"watcher: invalid {what}")
    return pid


def parse_args(argv: Sequence[str]) -> Mode:
    """The mode *argv* asks for; :class:`UsageError` (exit 2, one line) for anything else."""
    args = list(argv)
    if not args or args == ["--arm"]:
        return Mode("arm")
    head = args[0]
    if head in ("--restart", "--stop") and len(args) == 1:
        return Mode(head[2:])
    if head == "--take-over" and len(args) <= 2:
        return Mode("take-over", arm_pid=_pid(args[1], "arm pid") if len(args) == 2 else None)
    if head == "--handling-delivered":
        if len(args) != 4 or args[2] != "--watcher-pid":
            raise UsageError("watcher: invalid handling delivery confirmation; " + USAGE[7:])
        from firstmate.episodes import valid_generation

        if not valid_generation(args[1]):
            raise UsageError("watcher: invalid recovery generation (expected [A-Za-z0-9._-]+)")
        return Mode("handling-delivered", generation=args[1],
                    watcher_pid=_pid(args[3], "successor watcher pid"))
    raise UsageError(USAGE)


# --- cycle links (store) ---------------------------------------------------------------------


@attrs.frozen
class Link:
    """Which arm started or attached to which watcher (and whose successor that watcher was)."""

    arm_pid: int
    arm_identity: str
    origin: str
    watcher_pid: int
    watcher_identity: str
    predecessor_pid: int | None = None
    predecessor_identity: str | None = None
    predecessor_arm_pid: int | None = None


def record_link(db: Store, link: Link) -> None:
    with db.transaction(timeout=10.0) as conn:
        conn.execute(
            "INSERT INTO cycle_links (at, arm_pid, arm_identity, origin, watcher_pid, "
            "watcher_identity, predecessor_pid, predecessor_identity, predecessor_arm_pid) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (time.time(), link.arm_pid, link.arm_identity, link.origin, link.watcher_pid,
             link.watcher_identity, link.predecessor_pid, link.predecessor_identity,
             link.predecessor_arm_pid),
        )
        conn.execute("DELETE FROM cycle_links WHERE id <= (SELECT max(id) FROM cycle_links) - ?",
                     (LINKS_KEEP,))


def started_link(db: Store, arm_pid: int) -> Link | None:
    """The newest cycle the arm *arm_pid* started, or None."""
    with db.reading() as conn:
        row = conn.execute(
            "SELECT arm_pid, arm_identity, origin, watcher_pid, watcher_identity, predecessor_pid,"
            " predecessor_identity, predecessor_arm_pid FROM cycle_links"
            " WHERE arm_pid = ? AND origin = 'started' ORDER BY id DESC LIMIT 1",
            (int(arm_pid),),
        ).fetchone()
    return None if row is None else _link(row)


def links(db: Store) -> list[Link]:
    """Every kept link, oldest first."""
    with db.reading() as conn:
        rows = conn.execute(
            "SELECT arm_pid, arm_identity, origin, watcher_pid, watcher_identity, predecessor_pid,"
            " predecessor_identity, predecessor_arm_pid FROM cycle_links ORDER BY id"
        ).fetchall()
    return [_link(row) for row in rows]


def _link(row: Sequence[object]) -> Link:
    def opt_int(value: object) -> int | None:
        return int(value) if isinstance(value, int) else None

    return Link(int(str(row[0])), str(row[1]), str(row[2]), int(str(row[3])), str(row[4]),
                opt_int(row[5]), None if row[6] is None else str(row[6]), opt_int(row[7]))


# --- helpers ---------------------------------------------------------------------------------


def reason_class(line: str) -> str:
    head = line.split(":", 1)[0].strip()
    return f"actionable-{head if head in ('signal', 'stale', 'check') else 'heartbeat'}"


def _exit_fields(returncode: int | None) -> tuple[int | None, str]:
    """(exit status as a shell shows it, signal name) for a child's return code."""
    if returncode is None:
        return None, "unknown"
    if returncode < 0:
        return 128 - returncode, cyclelog.signal_name(-returncode)
    if returncode - 128 in (int(s) for s in stopsignals.STOP_SIGNALS):
        return returncode, cyclelog.signal_name(returncode - 128)
    return returncode, "none"


def _pidfd(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


def _started(ident: ProcessIdentity | None, fallback: float) -> float:
    """When a watcher started: its identity's start time, else *fallback* (an upper bound)."""
    return ident.started if ident is not None else fallback


def _readable(fds: Sequence[int | None], timeout: float) -> set[int]:
    """The descriptors of *fds* that are readable (or hung up) within *timeout* seconds."""
    live = [fd for fd in fds if fd is not None and fd >= 0]
    if not live:
        time.sleep(max(0.0, timeout))
        return set()
    poller = select.poll()
    for fd in live:
        poller.register(fd, select.POLLIN | select.POLLPRI)
    try:
        events = poller.poll(max(0.0, timeout) * 1000)
    except OSError:
        return set()
    return {fd for fd, _ in events}


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """The watcher child's environment: ours, with this code first on PYTHONPATH."""
    out = dict(env)
    parent = str(code_dir().parent)
    paths = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
    if parent not in paths and parent not in _site_dirs():
        out["PYTHONPATH"] = os.pathsep.join([parent, *paths])
    return out


def _site_dirs() -> set[str]:
    import site

    dirs = set(site.getsitepackages()) if hasattr(site, "getsitepackages") else set()
    with contextlib.suppress(Exception):
        dirs.add(site.getusersitepackages())
    return {os.path.abspath(d) for d in dirs}


@attrs.define(eq=False)
class Child:
    """The watcher this arm spawned."""

    proc: subprocess.Popen[bytes]
    identity: ProcessIdentity | None
    started_at: float
    pidfd: int | None = None
    ready: int | None = None
    out_fd: int | None = None
    buffer: bytes = b""
    lines: list[str] = attrs.Factory(list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read(self) -> None:
        """Take what the child wrote; complete lines go to :attr:`lines`."""
        while self.out_fd is not None:
            try:
                data = os.read(self.out_fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                os.close(self.out_fd)
                self.out_fd = None
                if self.buffer:
                    self.lines.append(self.buffer.decode("utf-8", "replace"))
                    self.buffer = b""
                break
            self.buffer += data
            *done, self.buffer = self.buffer.split(b"\n")
            self.lines.extend(part.decode("utf-8", "replace") for part in done)

    def take_ready(self) -> None:
        if self.ready is not None:
            with contextlib.suppress(OSError):
                os.read(self.ready, 64)
            with contextlib.suppress(OSError):
                os.close(self.ready)
            self.ready = None

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def close(self) -> None:
        for fd in (self.pidfd, self.ready, self.out_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.pidfd = self.ready = self.out_fd = None


# --- the arm ---------------------------------------------------------------------------------


@attrs.define(eq=False)
class Arm:
    home: Home
    env: Mapping[str, str]
    out: TextIO
    me: ProcessIdentity
    db: Store
    child: Child | None = None
    reason: str | None = None
    #: Status lines printed (tests and diagnostics).
    printed: list[str] = attrs.Factory(list)
    _failed_lines: list[str] = attrs.Factory(list)
    _last_age: float | None = None

    @property
    def confirm_timeout(self) -> float:
        return env_float(self.env, "FM_ARM_CONFIRM_TIMEOUT", DEFAULT_CONFIRM_TIMEOUT)

    @property
    def successor_timeout(self) -> float:
        """How long an arm whose watcher closed without a delivery waits for a successor. Kept
        apart from the start confirmation, so shortening it never shortens a child's start."""
        return env_float(self.env, "FM_ARM_SUCCESSOR_CONFIRM_TIMEOUT", self.confirm_timeout)

    @property
    def tick(self) -> float:
        return env_float(self.env, "FM_ARM_ATTACH_POLL", DEFAULT_TICK)

    # --- output ------------------------------------------------------------------------------

    def say(self, line: str) -> None:
        self.printed.append(line)
        self.write_line(self.out, line)

    @staticmethod
    def write_line(out: TextIO, line: str) -> None:
        # The caller may have closed our stdout; the exit status still tells it what happened.
        try:
            out.write(line + "\n")
            out.flush()
        except (OSError, ValueError):
            pass

    def fail(self, what: str, code: int = ExitCode.FAILED) -> int:
        self.say(f"watcher: FAILED - {what}")
        return code

    def deliver(self, reason: str) -> int:
        if self.reason is None:
            self.reason = reason
            self.say(reason)
        return ExitCode.OK

    # --- observations ------------------------------------------------------------------------

    def health(self) -> WatcherHealth:
        health = watcher_health(self.home, self.env)
        if health.beacon_age is not None:
            self._last_age = health.beacon_age
        return health

    def ground(self) -> str | None:
        """The arm-ground line's path when home, state dir or this code is gone, else None."""
        for path in (self.home.root, self.home.state, code_dir()):
            if not os.path.isdir(path):
                return str(path)
        return None

    def ground_failed(self, path: str) -> int:
        return self.fail(f"arm ground removed: {path} no longer exists")

    def row(self, *, watcher_pid: int | None, origin: str, started_at: float, reason: str,
            returncode: int | None = None, lock_before: str = "none",
            successor: str = "none") -> None:
        exit_code, sig = _exit_fields(returncode)
        after = watcher_health(self.home, self.env) if self.home.state.is_dir() else None
        cyclelog.append(self.home, CycleRow(
            arm_pid=self.me.pid, arm_identity=self.me.token(), watcher_pid=watcher_pid,
            origin=origin, started_at=started_at, ended_at=time.time(), exit_code=exit_code,
            signal=sig, reason=reason, beacon_age=cyclelog.beacon_age_field(self._last_age),
            lock_before=lock_before,
            lock_after=lock_text(after.pid, after.identity) if after else "none",
            successor=successor,
        ), self.env)

    def publish_if_gone(self) -> None:
        """A watcher that ended without closing its cycle (killed outright) is down now:
        say so at once rather than at the next watcher's start (firstmate.downtime)."""
        from firstmate.downtime import publish_if_gone

        publish_if_gone(self.db)

    def name_successor(self, watcher_pid: int, successor_pid: int) -> None:
        """The row that said ``successor=awaited`` for *watcher_pid* now names the one found."""
        cyclelog.name_successor(self.home, self.me.pid, self.me.token(), watcher_pid,
                                f"attached:{successor_pid}", self.env)

    def link(self, origin: str, pid: int, identity: str, *,
             predecessor: tuple[int, str] | None = None) -> None:
        pred_arm = predecessor_arm_pid(self.env)
        if predecessor is None and pred_arm is not None and origin == "started":
            with contextlib.suppress(FirstmateError, sqlite3.Error):
                found = started_link(self.db, pred_arm)
                if found is not None:
                    predecessor = (found.watcher_pid, found.watcher_identity)
        with contextlib.suppress(FirstmateError, sqlite3.Error):
            record_link(self.db, Link(
                self.me.pid, self.me.token(), origin, pid, identity,
                predecessor[0] if predecessor else None, predecessor[1] if predecessor else None,
                pred_arm,
            ))

    def delivered(self, pid: int, identity: str) -> str | None:
        """The reason the watcher (pid *and* identity) recorded before it released, if any."""
        from firstmate import deliveries

        try:
            with self.db.reading() as conn:
                found = deliveries.find(conn, pid, identity)
        except (FirstmateError, sqlite3.Error):
            return None
        return None if found is None else found.reason

    def wait_successor(self, exclude: int, since: float) -> WatcherHealth | str | None:
        """A healthy watcher other than *exclude*, waited for up to the successor timeout; or
        the reason of a successor (a watcher started after *since*, when *exclude* started)
        that already came and closed before we looked (from the delivery ledger)."""
        from firstmate import deliveries

        deadline = time.monotonic() + self.successor_timeout
        while True:
            health = self.health()
            if health.healthy and health.pid != exclude:
                return health
            with contextlib.suppress(FirstmateError, sqlite3.Error):
                with self.db.reading() as conn:
                    found = deliveries.successor_since(conn, since, exclude)
                if found is not None:
                    return found.reason
            if self.ground() is not None or time.monotonic() >= deadline:
                return None
            time.sleep(SUCCESSOR_POLL)

    @property
    def stall_bound(self) -> float:
        """Beacon age past which a verified watcher of ours counts as wedged and is replaced."""
        from firstmate.health import grace

        return env_float(self.env, STALL_BOUND_ENV, STALL_GRACES * grace(self.env))

    @property
    def ping_window(self) -> float:
        return env_float(self.env, STALL_PING_ENV, DEFAULT_STALL_PING)

    def wedged(self, health: WatcherHealth) -> bool:
        return (health.state == "stale-beacon" and health.verified
                and health.beacon_age is not None and health.beacon_age >= self.stall_bound)

    def stale(self, health: WatcherHealth, *, origin: str = "attached",
              started_at: float | None = None) -> int:
        if self.wedged(health):
            return self.recover_wedged(health, origin=origin, started_at=started_at)
        self.row(watcher_pid=health.pid, origin=origin,
                 started_at=time.time() if started_at is None else started_at,
                 reason="stale-beacon", lock_before=lock_text(health.pid, health.identity))
        return self.fail(
            f"live watcher pid={health.pid} has a stale beacon ({health.age_text()}s, grace "
            f"{health.grace:g}s); left running - inspect it, or replace it with fm arm --take-over"
        )

    # --- default mode --------------------------------------------------------------------------

    def arm(self) -> int:
        health = self.health()
        if health.healthy:
            return self.follow(health)
        if health.state == "stale-beacon":
            return self.stale(health)
        return self.start()

    def start(self) -> int:
        self.spawn()
        return self.confirm()

    def spawn(self) -> None:
        env = child_env(self.env)
        ready_r, ready_w = os.pipe()
        env[READY_FD_ENV] = str(ready_w)
        # Hold stop signals while the child is created and recorded, so an interrupt always
        # finds it (the child resets its own mask before it installs its handlers).
        stopsignals.block()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "firstmate", "watch"], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, env=env, pass_fds=(ready_w,), close_fds=True,
            )
            started = time.time()
            os.close(ready_w)
            assert proc.stdout is not None
            out_fd = proc.stdout.fileno()
            os.set_blocking(out_fd, False)
            # The identity is learnt from the child's own owner record at confirmation: read
            # now, /proc may still show the command line of the exec in progress.
            self.child = Child(proc, None, started, _pidfd(proc.pid), ready_r, out_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(ready_w)
            with contextlib.suppress(OSError):
                os.close(ready_r)
            raise
        finally:
            stopsignals.unblock()

    def _owned(self, health: WatcherHealth) -> bool:
        """Our child is the verified healthy holder. (Its pid cannot have been reused: we have
        not reaped it.) Its identity is taken from the record the holder check verified."""
        child = self.child
        if child is None or not health.healthy or health.pid != child.pid:
            return False
        child.identity = ProcessIdentity.parse(health.identity)
        return child.identity is not None

    def confirm(self) -> int:
        child = self.child
        assert child is not None
        deadline = time.monotonic() + self.confirm_timeout
        while True:
            child.read()
            if any(REASON_RE.match(line) for line in child.lines):
                # An immediate wake: the child polled (beacon) and closed before we looked.
                started = self.started_line(child.pid)
                return started if started is not None else self.follow_owned()
            health = self.health()
            if self._owned(health):
                started = self.started_line(child.pid)
                return started if started is not None else self.follow_owned(health)
            if child.exited():
                return self.child_closed(announce=True)
            left = deadline - time.monotonic()
            if left <= 0:
                return self.confirmation_timeout()
            events = _readable([child.out_fd, child.ready, child.pidfd], min(0.25, left))
            if child.ready is not None and child.ready in events:
                child.take_ready()

    def started_line(self, pid: int) -> int | None:
        """Print ``watcher: started …``; an exit status when a handling successor cannot say
        which generation it carries."""
        child = self.child
        assert child is not None
        line = f"watcher: started pid={pid} (beacon fresh)"
        if predecessor_arm_pid(self.env) is not None:
            generation = self.generation()
            if generation is None:
                self.row(watcher_pid=pid, origin="started", started_at=child.started_at,
                         reason="handling-handoff-failed")
                return self.fail("established successor could not inspect handling state")
            line += f" recovery-generation={generation}"
        if child.identity is None and not child.exited():
            from firstmate.identity import identity_of

            child.identity = identity_of(child.pid)  # it has printed: its exec is long done
        # The link is durable before anyone reading the status line can act on it.
        if child.identity is not None:
            self.link("started", pid, child.identity.token())
        self.say(line)
        return None

    def generation(self) -> str | None:
        from firstmate import episodes

        try:
            with self.db.reading() as conn:
                state = episodes.read(conn)
        except (FirstmateError, sqlite3.Error):
            return None
        return state.generation if isinstance(state, episodes.Episode) else None

    def confirmation_timeout(self) -> int:
        child = self.child
        assert child is not None
        self.stop_child()
        self.relay_failures()
        self.row(watcher_pid=child.pid, origin="started", started_at=child.started_at,
                 reason="confirmation-timeout", returncode=child.proc.returncode)
        return self.fail("no live watcher with a fresh beacon")

    def handle_lines(self) -> None:
        child = self.child
        assert child is not None
        for line in child.lines:
            if REASON_RE.match(line):
                self.deliver(line)
            elif line.startswith("watcher: FAILED"):
                self._failed_lines.append(line)
            elif line.startswith("watcher: already running"):
                continue
            elif line.strip():
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.write(line + "\n")
        child.lines.clear()

    def relay_failures(self) -> None:
        if self.child is not None:
            self.child.read()
            self.handle_lines()
        for line in self._failed_lines:
            self.say(line)
        self._failed_lines.clear()

    def follow_owned(self, health: WatcherHealth | None = None) -> int:
        """Wait for our child's close; relay its reason line the moment it is written."""
        child = self.child
        assert child is not None
        lock_before = lock_text(child.pid, child.identity.token() if child.identity else None)
        while True:
            child.read()
            self.handle_lines()
            if child.exited():
                return self.child_closed(lock_before)
            events = _readable([child.out_fd, child.pidfd],
                               self.tick if child.pidfd is not None else min(self.tick, 0.2))
            if events or self.reason is not None:
                continue
            gone = self.ground()
            if gone is not None:
                self.stop_child()
                self.row(watcher_pid=child.pid, origin="started", started_at=child.started_at,
                         reason="ground-removed", returncode=child.proc.returncode)
                return self.ground_failed(gone)
            now = self.health()
            if now.state == "stale-beacon" and now.pid == child.pid and self.wedged(now):
                # Our own child stopped polling: given until the stall bound, then replaced.
                return self.recover_wedged(now, origin="started", started_at=child.started_at)

    def child_closed(self, lock_before: str = "none", *, announce: bool = False) -> int:
        """Our child exited: resolve its cycle. With *announce* no status line was printed yet
        (it closed before confirmation could look): a reason it printed still gets its
        ``started`` line first, so the status line always precedes the reason."""
        child = self.child
        assert child is not None
        rc = child.proc.wait()
        deadline = time.monotonic() + 0.5
        while child.out_fd is not None and time.monotonic() < deadline:
            child.read()
            if child.out_fd is not None:
                _readable([child.out_fd], deadline - time.monotonic())
        child.read()
        if announce and any(REASON_RE.match(line) for line in child.lines):
            failed = self.started_line(child.pid)
            if failed is not None:
                return failed
        self.handle_lines()
        child.close()

        def row(reason: str, successor: str = "none") -> None:
            self.row(watcher_pid=child.pid, origin="started", started_at=child.started_at,
                     reason=reason, returncode=rc, lock_before=lock_before, successor=successor)

        if self.reason is not None:
            row(reason_class(self.reason))
            return ExitCode.OK
        gone = self.ground()
        if gone is not None:
            row("ground-removed")
            return self.ground_failed(gone)
        _, sig = _exit_fields(rc)
        klass = ("unexpected-clean-exit" if rc == 0
                 else "signal-exit" if sig != "none" else "nonzero-exit")
        if self._failed_lines:
            row(klass)
            self.relay_failures()
            return rc if 0 < rc < 128 else ExitCode.FAILED
        if child.identity is not None:
            reason = self.delivered(child.pid, child.identity.token())
            if reason is not None:
                row("clean-exit-delivered-wake")
                return self.deliver(reason)
        # The row goes out before any wait for a successor: a take-over reads it to learn how
        # this watcher ended. The successor followed next is in the store's cycle links.
        row(klass, "awaited")
        self.publish_if_gone()
        successor = self.wait_successor(exclude=child.pid, since=_started(child.identity,
                                                                         child.started_at))
        if isinstance(successor, str):
            return self.deliver(successor)  # it came and closed before we looked
        if successor is not None and successor.pid is not None:
            self.name_successor(child.pid, successor.pid)
            previous = (child.pid, child.identity.token()) if child.identity else None
            return self.follow(successor, predecessor=previous)
        gone = self.ground()
        if gone is not None:
            return self.ground_failed(gone)
        return self.fail("cycle ended without an actionable reason")

    def stop_child(self) -> None:
        """TERM our child, wait (bounded), KILL if it must, and reap it."""
        child = self.child
        if child is None or child.proc.returncode is not None:
            return
        bound = cleanup_lock_bound(self.env.get("FM_WATCHER_CLEANUP_LOCK_BOUND")) + 3.0
        with contextlib.suppress(OSError):
            child.proc.send_signal(signal.SIGTERM)
            child.proc.send_signal(signal.SIGCONT)
        try:
            child.proc.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                child.proc.kill()
            child.proc.wait()

    # --- following a watcher we did not start ------------------------------------------------

    def follow(self, health: WatcherHealth, *,
               predecessor: tuple[int, str] | None = None) -> int:
        """Attach to *health*'s watcher and its identity-matched successors until one closes."""
        from firstmate.identity import matches

        while True:
            assert health.pid is not None
            pid, token = health.pid, health.identity or ""
            ident = ProcessIdentity.parse(token)
            self.link("attached", pid, token, predecessor=predecessor)
            self.say(f"watcher: attached pid={pid} (beacon {health.age_text()}s)")
            started_at = time.time()
            lock_before = lock_text(pid, token)
            pidfd = _pidfd(pid)
            try:
                alive = ident is not None and matches(ident)
                while alive:
                    events = _readable([pidfd], self.tick if pidfd is not None
                                       else min(self.tick, 0.2))
                    if pidfd is not None and pidfd in events:
                        break
                    if pidfd is None and not (ident is not None and matches(ident)):
                        break
                    gone = self.ground()
                    if gone is not None:
                        self.row(watcher_pid=pid, origin="attached", started_at=started_at,
                                 reason="ground-removed", lock_before=lock_before)
                        return self.ground_failed(gone)
                    now = self.health()
                    if now.state == "stale-beacon" and now.pid == pid and (
                            self.wedged(now) or not now.verified):
                        # A watcher of ours is given until the stall bound, then replaced; one
                        # that is not verifiably ours is reported and left alone.
                        return self.stale(now, started_at=started_at)
            finally:
                if pidfd is not None:
                    os.close(pidfd)
            reason = self.delivered(pid, token)
            if reason is not None:
                self.row(watcher_pid=pid, origin="attached", started_at=started_at,
                         reason="attached-delivered-wake", lock_before=lock_before)
                return self.deliver(reason)
            self.row(watcher_pid=pid, origin="attached", started_at=started_at,
                     reason="attached-cycle-ended", lock_before=lock_before,
                     successor="awaited")
            self.publish_if_gone()
            successor = self.wait_successor(exclude=pid, since=_started(ident, started_at))
            if isinstance(successor, str):
                return self.deliver(successor)  # it came and closed before we looked
            if successor is None or successor.pid is None:
                gone = self.ground()
                if gone is not None:
                    return self.ground_failed(gone)
                return self.fail("cycle ended without an actionable reason")
            self.name_successor(pid, successor.pid)
            predecessor = (pid, token)
            health = successor

    # --- a wedged watcher ----------------------------------------------------------------------

    def recover_wedged(self, health: WatcherHealth, *, origin: str = "attached",
                       started_at: float | None = None) -> int:
        """Replace a verified watcher of ours whose beacon is older than the stall bound.

        It is rung first and given :attr:`ping_window` to prove it is alive (one that was only
        suspended, a laptop that slept, refreshes its beacon at once and is followed, not
        replaced). Otherwise it is stopped through the same verified signalling a take-over
        uses, a ``check: watcher-replaced`` row records the replacement (the next wake shows it
        once, with whatever queued meanwhile), and a fresh cycle starts.
        """
        from firstmate.locks import FileLock

        assert health.pid is not None
        # One recoverer at a time (every arm following the watcher meets the wedge at once): the
        # others wait for its outcome and then attach to whatever watches.
        lock = FileLock(self.home.lock_path(RECOVER_LOCK), "recover", self.home.root)
        bound = (self.ping_window + cleanup_lock_bound(self.env.get("FM_WATCHER_CLEANUP_LOCK_BOUND"))
                 + 5.0 + self.confirm_timeout)
        try:
            lock.acquire(bound)
        except LockTimeout:
            return self.fail(f"wedged watcher pid={health.pid} is being replaced by another arm "
                             "that did not finish; run fm status")
        try:
            now = self.health()
            if not (now.pid == health.pid and self.wedged(now)):
                outcome: WatcherHealth | str = "again"  # recovered (or gone) meanwhile
            else:
                outcome = self.replace_wedged(now, origin=origin, started_at=started_at)
        finally:
            lock.release()
        child = self.child
        if (outcome == "again" or isinstance(outcome, WatcherHealth)) and child is not None \
                and not child.exited() and self.health().pid == child.pid:
            return self.follow_owned()  # our own child answered: go on following it
        if isinstance(outcome, WatcherHealth):
            return self.follow(outcome)  # it answered the ring: only slow, not wedged
        if outcome == "again":
            return self.arm()
        if outcome == "start":
            return self.start()
        return self.fail(outcome)

    def replace_wedged(self, health: WatcherHealth, *, origin: str,
                       started_at: float | None) -> WatcherHealth | str:
        """Under the recovery lock: ring, wait the ping window, then stop the wedged watcher and
        record the replacement. The answer: the watcher's health when it answered the ring,
        ``again`` when it went away meanwhile, ``start`` when a fresh cycle may start, or the
        message of a failure."""
        from firstmate import bell, queue

        assert health.pid is not None
        pid, age = health.pid, health.beacon_age
        with contextlib.suppress(OSError, FirstmateError):
            bell.ring(self.home)
        deadline = time.monotonic() + self.ping_window
        while time.monotonic() < deadline:
            time.sleep(SUCCESSOR_POLL)
            now = self.health()
            if now.healthy and now.pid == pid:
                return now
            if now.pid != pid:
                return "again"
        self.row(watcher_pid=pid, origin=origin,
                 started_at=time.time() if started_at is None else started_at,
                 reason="stalled-holder-replaced", lock_before=lock_text(pid, health.identity))
        if self.stop_watcher(health) == "alive":
            return (f"wedged watcher pid={pid} (beacon {health.age_text()}s) did not stop when "
                    "signalled; left running - inspect it (it may be stuck in the kernel)")
        previous = self.child
        if previous is not None and previous.pid == pid:  # our own child: reap it
            with contextlib.suppress(subprocess.TimeoutExpired):
                previous.proc.wait(timeout=self.confirm_timeout)
            previous.close()
            self.child = None
        shown = "unknown" if age is None else f"{age:.0f}s"
        with contextlib.suppress(FirstmateError, sqlite3.Error):
            queue.append(self.db, "check", REPLACED_KEY,
                         f"check: watcher-replaced: watcher pid={pid} was wedged (beacon "
                         f"{shown} old, stall bound {self.stall_bound:g}s) and was replaced; "
                         "wakes queued meanwhile are delivered with this one")
        return "start"

    # --- stopping ------------------------------------------------------------------------------

    def stop_watcher(self, health: WatcherHealth) -> str:
        """TERM the verified watcher *health* names and wait for it: ``stopped``, ``gone`` (it
        was no longer that process), or ``alive`` (it outlived the wait)."""
        from firstmate.identity import matches, signal_verified

        ident = ProcessIdentity.parse(health.identity)
        if ident is None or ident.pid != health.pid:
            return "gone"
        pidfd = _pidfd(ident.pid)
        try:
            if not signal_verified(ident, signal.SIGTERM):
                return "gone"
            # A stopped (SIGSTOP) watcher handles its TERM only once it runs again.
            signal_verified(ident, signal.SIGCONT)
            bound = cleanup_lock_bound(self.env.get("FM_WATCHER_CLEANUP_LOCK_BOUND")) + 5.0
            deadline = time.monotonic() + bound
            while matches(ident):
                left = deadline - time.monotonic()
                if left <= 0:
                    return "alive"
                _readable([pidfd], min(left, 0.1 if pidfd is None else left))
            return "stopped"
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def verified_holder(self) -> WatcherHealth:
        """The current holder, waiting (bounded) for a starting holder to publish its record."""
        health = self.health()
        deadline = time.monotonic() + self.confirm_timeout
        while health.state == "unverified" and not health.verified and \
                time.monotonic() < deadline:
            time.sleep(SUCCESSOR_POLL)
            health = self.health()
        return health

    def stop(self) -> int:
        health = self.verified_holder()
        if health.state == "none":
            self.say("watcher: none running")
            return ExitCode.OK
        if not health.verified:
            return self.fail(f"lock holder pid={health.pid} could not be verified; left alone")
        outcome = self.stop_watcher(health)
        if outcome == "alive":
            return self.fail(f"pid={health.pid} did not stop")
        self.say(f"watcher: stopped pid={health.pid}" if outcome == "stopped"
                 else "watcher: none running")
        return ExitCode.OK

    def restart(self) -> int:
        health = self.verified_holder()
        if health.state != "none":
            if not health.verified:
                return self.fail(f"lock holder pid={health.pid} could not be verified; left alone")
            if self.stop_watcher(health) == "alive":
                return self.fail(f"pid={health.pid} did not stop")
        return self.start()

    def take_over(self, arm_pid: int | None) -> int:
        from firstmate import episodes
        from firstmate.identity import identity_of
        from firstmate.store import last_seq

        health = self.verified_holder()
        if arm_pid is not None:
            link = started_link(self.db, arm_pid)
            live_arm = identity_of(arm_pid)
            owns = (
                link is not None and health.verified and health.pid == link.watcher_pid
                and health.identity == link.watcher_identity
                and (live_arm is None or live_arm.token() == link.arm_identity)
            )
            if not owns:
                # That arm owns no live cycle here: just attach (or start when none runs).
                return self.arm()
        if health.state == "none":
            return self.start()
        if not health.verified:
            return self.fail(f"lock holder pid={health.pid} could not be verified; left alone")
        with self.db.reading() as conn:
            before, seq_before = episodes.read(conn), last_seq(conn)
        term_at = time.time()
        outcome = self.stop_watcher(health)
        if outcome == "alive":
            return self.fail(f"pid={health.pid} did not stop")
        if outcome == "stopped" and isinstance(before, episodes.Episode) and \
                before.status == "acked" and health.pid is not None:
            self.restore_acked(before, seq_before, health.pid, arm_pid, term_at)
        return self.start()

    def restore_acked(self, before: object, seq_before: int, watcher_pid: int,
                      arm_pid: int | None, term_at: float) -> None:
        """Re-retire the episode the take-over's stop reopened, when the taken-over watcher's
        cycle row shows it ended by that TERM and no wake was appended since."""
        from firstmate import episodes, queue
        from firstmate.store import last_seq

        assert isinstance(before, episodes.Episode)
        deadline = time.monotonic() + TAKEOVER_ROW_WAIT
        while not any(
            row.watcher_pid == watcher_pid and row.signal == "TERM"
            and (arm_pid is None or row.arm_pid == arm_pid) and row.ended_at >= term_at - 1.0
            for row in cyclelog.rows(self.home, self.env)
        ):
            if time.monotonic() >= deadline:
                return
            time.sleep(SUCCESSOR_POLL)
        with contextlib.suppress(FirstmateError), queue.locked(self.db, timeout=10.0) as conn:
            now = episodes.read(conn)
            if (isinstance(now, episodes.Episode) and now.status == "pending"
                    and now.kind == "downtime" and now.generation != before.generation
                    and last_seq(conn) == seq_before):
                episodes.acknowledge(conn, now.generation)

    # --- handoff confirmation ------------------------------------------------------------------

    def handling_delivered(self, generation: str, watcher_pid: int, *,
                           timeout: float = 10.0) -> int:
        from firstmate import episodes

        health = self.health()
        if not (health.verified and health.pid == watcher_pid):
            return self.fail(f"pid={watcher_pid} is not the live identity-matched watcher")
        with self.db.transaction(timeout=timeout) as conn:
            outcome = episodes.begin_handling(conn, generation)
            state = episodes.read(conn)
        token = state.token() if isinstance(state, episodes.Episode) else "none"
        if outcome is episodes.Handling.MISMATCH:
            return self.fail(f"recovery generation {generation} does not match the current "
                             f"episode {token}", ExitCode.CONFLICT)
        if outcome is episodes.Handling.UNUSABLE:
            return self.fail(f"no open recovery episode to hand off (episode {token})")
        note = " (already acknowledged)" if outcome is episodes.Handling.ALREADY_ACKED else ""
        self.say(f"watcher: handling delivered generation={generation} pid={watcher_pid}{note}")
        return ExitCode.OK

    # --- interruption --------------------------------------------------------------------------

    def interrupted(self, signum: int) -> int:
        child = self.child
        if child is not None:
            self.stop_child()
            child.read()
            self.handle_lines()
            child.close()
            self.row(watcher_pid=child.pid, origin="started", started_at=child.started_at,
                     reason="arm-interrupted", returncode=child.proc.returncode)
        if self.reason is None:
            self.fail(f"arm interrupted by {signal.Signals(signum).name}")
        return 128 + signum


def run(argv: Sequence[str], env: Mapping[str, str] | None = None,
        out: TextIO | None = None) -> int:
    """``fm arm``: returns the exit status (see docs/cli.md)."""
    from firstmate.identity import current

    mode = parse_args(argv)
    env = dict(os.environ if env is None else env)
    out = sys.stdout if out is None else out
    # Held from before the handlers exist until inside the try, so no stop lands in between.
    stopsignals.block()
    previous = stopsignals.install(_interrupt, unblock_now=False)
    arm: Arm | None = None
    try:
        stopsignals.unblock()  # a stop pending since our spawn is handled by the except below
        refused = disposable_checkout(code_dir(), env)
        if refused is not None:
            out.write("watcher: FAILED - refusing to arm from a disposable validation checkout: "
                      f"{refused}\n")
            out.flush()
            return ExitCode.FAILED
        home = Home(resolve_root(env))
        if mode.name in ("arm", "restart", "take-over"):
            home.ensure()
        # The singleton is inspected (and a holder signalled) through these paths: a symlink
        # there is unsafe state (exit 4), not an unverifiable holder to wait for.
        for path in (home.root, home.state):
            refuse_symlink(path)
        if home.state.is_dir():
            refuse_symlink(home.lock_path(LOCK_NAME))
        arm = Arm(home, env, out, current(), Store(home))
        gone = arm.ground()
        if gone is not None:
            return arm.ground_failed(gone)
        try:
            if mode.name == "stop":
                return arm.stop()
            if mode.name == "restart":
                return arm.restart()
            if mode.name == "take-over":
                return arm.take_over(mode.arm_pid)
            if mode.name == "handling-delivered":
                assert mode.generation is not None and mode.watcher_pid is not None
                return arm.handling_delivered(mode.generation, mode.watcher_pid)
            return arm.arm()
        except Interrupted as stop:
            return arm.interrupted(stop.signum)
        finally:
            arm.db.close()
    except Interrupted as stop:
        # Interrupted outside a cycle (while setting up, or closing the store): the caller
        # still gets its one line, unless the reason itself is already out.
        what = f"arm interrupted by {signal.Signals(stop.signum).name}"
        if arm is None:
            Arm.write_line(out, f"watcher: FAILED - {what}")
        elif arm.reason is None and not any(line.startswith("watcher: FAILED - ")
                                            for line in arm.printed):
            arm.fail(what)
        return 128 + stop.signum
    finally:
        stopsignals.restore(previous)


__all__ = ["REASON_RE", "USAGE", "Arm", "Link", "Mode", "child_env", "links", "parse_args",
           "reason_class", "record_link", "run", "started_link"]
