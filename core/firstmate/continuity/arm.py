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
    confirmation timeout); a child that a signal ended is waited for only when the fm command
    that stopped it recorded a replacement (:mod:`firstmate.store.stopping`).
``--restart`` / ``--stop``
    Stop the current identity-verified watcher (TERM, bounded wait); restart then starts a
    fresh cycle. A reused pid is never signalled.
``--take-over [ARM_PID]``
    Stop the watcher the named arm started (from the cycle links in the store) and own a fresh
    cycle. An arm pid that owns no live cycle only attaches.
``--handling-delivered GEN --watcher-pid PID``
    Confirm a continuity handoff: PID must be the live identity-matched watcher; the episode of
    GEN moves to handling.

Waiting is event-driven: the child's stdout and a pidfd (Linux) wake the arm; a five-second tick
(``FM_ARM_ATTACH_POLL``) only checks the arm's ground and the beacon's age.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import TextIO

import attrs

from firstmate.base import stopsignals
from firstmate.base.envnum import env_float
from firstmate.base.errors import FirstmateError
from firstmate.base.exitcodes import ExitCode
from firstmate.base.names import fm_module_argv
from firstmate.base.pidfd import open_pidfd
from firstmate.continuity import armstop
from firstmate.continuity.armlinks import Link, record_link, started_link
from firstmate.continuity.watchchild import (
    REASON_RE,
    Child,
    _exit_fields,
    _readable,
    _started,
    child_env,
    reason_class,
)
from firstmate.store import cyclelog, stopping
from firstmate.store.cyclelog import CycleRow, lock_text
from firstmate.store.database import Store
from firstmate.store.health import WatcherHealth, watcher_health
from firstmate.store.home import Home
from firstmate.store.identity import ProcessIdentity
from firstmate.watch.directline import DIRECT_FD_ENV, DIRECT_PREFIX, DIRECT_SENT
from firstmate.watch.watcher import (
    READY_FD_ENV,
    code_dir,
    predecessor_arm_pid,
)

DEFAULT_CONFIRM_TIMEOUT = 10.0
#: A verified watcher of ours whose beacon is older than this many graces is wedged
#: (``FM_ARM_STALL_BOUND`` sets the seconds); it is rung, given ``FM_ARM_STALL_PING`` seconds to
#: answer, then replaced.
STALL_GRACES = 2.0
STALL_BOUND_ENV = "FM_ARM_STALL_BOUND"
STALL_PING_ENV = "FM_ARM_STALL_PING"
DEFAULT_STALL_PING = 5.0
#: Seconds between the ground and beacon-age checks; a close is seen at once (pidfd, stdout).
DEFAULT_TICK = 5.0
#: Bounded polls on failure paths (waiting for a successor to publish its beacon).
SUCCESSOR_POLL = 0.05


def _stdout_copy(out: TextIO) -> int | None:
    """A descriptor (3 or above) for the file *out* writes to, for the watcher's direct reason
    line; None when *out* has none (a caller's stream object) or it is closed."""
    if os.name != "posix":
        return None
    try:
        import fcntl

        return fcntl.fcntl(out.fileno(), fcntl.F_DUPFD_CLOEXEC, 3)
    except (AttributeError, OSError, ValueError):
        return None


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
    #: A reason our watcher said it writes to our stdout itself, until it says it was sent.
    _unsent: str | None = None
    _last_age: float | None = None
    #: The cycles already in the cycle log: (origin, watcher pid, when this arm began it).
    _logged: set[tuple[str, int | None, float]] = attrs.Factory(set)

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
        """Write the cycle's one row. A cycle already written is not written again: the mark is
        set, with stops held, before the write, so an interruption landing after it (while
        the FAILED line that follows is printed) cannot add an ``arm-interrupted`` row."""
        key = (origin, watcher_pid, started_at)
        held = signal.pthread_sigmask(signal.SIG_BLOCK, stopsignals.STOP_SIGNALS)
        try:
            if key in self._logged:
                return
            self._logged.add(key)
            exit_code, sig = _exit_fields(returncode)
            after = watcher_health(self.home, self.env) if self.home.state.is_dir() else None
            cyclelog.append(self.home, CycleRow(
                arm_pid=self.me.pid, arm_identity=self.me.token(), watcher_pid=watcher_pid,
                origin=origin, started_at=started_at, ended_at=time.time(),
                exit_code=exit_code, signal=sig, reason=reason,
                beacon_age=cyclelog.beacon_age_field(self._last_age), lock_before=lock_before,
                lock_after=lock_text(after.pid, after.identity) if after else "none",
                successor=successor,
            ), self.env)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def publish_if_gone(self) -> None:
        """A watcher that ended without closing its cycle (killed outright) is down now:
        say so at once rather than at the next watcher's start (firstmate.store.downtime)."""
        from firstmate.store.downtime import publish_if_gone

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
        from firstmate.store import deliveries

        try:
            with self.db.reading() as conn:
                found = deliveries.find(conn, pid, identity)
        except (FirstmateError, sqlite3.Error):
            return None
        return None if found is None else found.reason

    def wait_successor(self, exclude: int, since: float, *,
                       patience: float | None = None) -> WatcherHealth | str | None:
        """A healthy watcher other than *exclude*, waited for up to *patience* seconds (the
        successor timeout when None; 0 looks once); or the reason of a successor (a watcher
        started after *since*, when *exclude* started) that already came and closed before we
        looked (from the delivery ledger)."""
        from firstmate.store import deliveries

        deadline = time.monotonic() + (self.successor_timeout if patience is None else patience)
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
        from firstmate.store.health import grace

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
            from firstmate.continuity.armrecover import recover_wedged

            return recover_wedged(self, health, origin=origin, started_at=started_at)
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
        # Direct mode (firstmate.watch.directline): our stdout, and the pipe we say go on.
        direct = _stdout_copy(self.out)
        go_r, go_w = os.pipe() if direct is not None else (-1, -1)
        passed = (ready_w,) if direct is None else (ready_w, direct, go_r)
        if direct is not None:
            env[DIRECT_FD_ENV] = f"{direct},{go_r}"
        else:  # (never a value inherited from whoever started us)
            env.pop(DIRECT_FD_ENV, None)
        # Hold stop signals while the child is created and recorded, so an interrupt always
        # finds it (the child resets its own mask before it installs its handlers).
        stopsignals.block()
        try:
            proc = subprocess.Popen(
                fm_module_argv("watch"), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, env=env, pass_fds=passed, close_fds=True,
            )
            started = time.time()
            assert proc.stdout is not None
            out_fd = proc.stdout.fileno()
            os.set_blocking(out_fd, False)
            # The identity is learnt from the child's own owner record at confirmation: read
            # now, /proc may still show the command line of the exec in progress.
            self.child = Child(proc, None, started, open_pidfd(proc.pid), ready_r, out_fd,
                               go=go_w if go_w >= 0 else None)
        except BaseException:
            for fd in (ready_r, go_w):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            raise
        finally:
            for fd in (ready_w, go_r, -1 if direct is None else direct):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
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
                return armstop.confirmation_timeout(self)
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
            from firstmate.store.identity import identity_of

            child.identity = identity_of(child.pid)  # it has printed: its exec is long done
        # The link is durable before anyone reading the status line can act on it.
        if child.identity is not None:
            self.link("started", pid, child.identity.token())
        self.say(line)
        child.say_go()  # the status line is out: the reason line may now come directly
        return None

    def generation(self) -> str | None:
        from firstmate.store import episodes

        try:
            with self.db.reading() as conn:
                state = episodes.read(conn)
        except (FirstmateError, sqlite3.Error):
            return None
        return state.generation if isinstance(state, episodes.Episode) else None

    def handle_lines(self) -> None:
        child = self.child
        assert child is not None
        for line in child.lines:
            if line.startswith(DIRECT_PREFIX):
                self._direct_line(line)
            elif REASON_RE.match(line):
                self.deliver(line)
            elif line.startswith("watcher: FAILED"):
                self._failed_lines.append(line)
            elif line.startswith("watcher: already running"):
                continue
            elif line.strip():
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.write(line + "\n")
        child.lines.clear()

    def _direct_line(self, line: str) -> None:
        """Our watcher writes (``direct: <reason>``) or wrote (``direct: sent``) its reason line
        to our stdout itself: it is this cycle's reason, printed without us."""
        if line == DIRECT_SENT:
            self._unsent = None
            return
        reason = line[len(DIRECT_PREFIX):]
        if self.reason is None and REASON_RE.match(reason):
            self.reason = reason
            self.printed.append(reason)
            self._unsent = reason

    def write_unsent(self) -> None:
        """Our watcher ended after naming its direct reason but before saying it was sent: it
        may never have been written, so we write it (at worst a second copy of the line in
        this one wake, never a lost one)."""
        unsent, self._unsent = self._unsent, None
        if unsent is not None:
            self.write_line(self.out, unsent)

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
            # In direct mode the reason line is the watcher's to write: its own lines are read
            # when it exits, so they never wake us (and take a CPU) while the line is on its way.
            watched = ([child.pidfd] if child.direct and child.pidfd is not None
                       else [child.out_fd, child.pidfd])
            events = _readable(watched,
                               self.tick if child.pidfd is not None else min(self.tick, 0.2))
            if events or self.reason is not None:
                continue
            gone = self.ground()
            if gone is not None:
                armstop.stop_child(self)
                self.row(watcher_pid=child.pid, origin="started", started_at=child.started_at,
                         reason="ground-removed", returncode=child.proc.returncode)
                return self.ground_failed(gone)
            now = self.health()
            if now.state == "stale-beacon" and now.pid == child.pid and self.wedged(now):
                # Our own child stopped polling: given until the stall bound, then replaced.
                from firstmate.continuity.armrecover import recover_wedged

                return recover_wedged(self, now, origin="started", started_at=child.started_at)

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
        self.write_unsent()
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
        # Ended by a signal that no fm command sent to replace it (killed from outside, or
        # fm arm --stop): no successor is coming, so one look, not the wait.
        patience = None
        if sig != "none" and not stopping.successor_expected(
                self.db, child.pid, child.identity.token() if child.identity else None):
            patience = 0.0
        successor = self.wait_successor(exclude=child.pid, since=_started(child.identity,
                                                                         child.started_at),
                                        patience=patience)
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

    # --- following a watcher we did not start ------------------------------------------------

    def follow(self, health: WatcherHealth, *,
               predecessor: tuple[int, str] | None = None) -> int:
        """Attach to *health*'s watcher and its identity-matched successors until one closes."""
        from firstmate.store.identity import matches

        while True:
            assert health.pid is not None
            pid, token = health.pid, health.identity or ""
            ident = ProcessIdentity.parse(token)
            self.link("attached", pid, token, predecessor=predecessor)
            self.say(f"watcher: attached pid={pid} (beacon {health.age_text()}s)")
            started_at = time.time()
            lock_before = lock_text(pid, token)
            pidfd = open_pidfd(pid)
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

__all__ = ["Arm"]
