"""The watcher: one process, one cycle, one reason line.

``fm watch`` claims the home's singleton (``state/watch.lock``), then polls its event sources in
order until one of them reports an actionable event. It makes the event durable (a queue row),
prints exactly one reason line, records the delivery, and exits 0. Benign events are absorbed
into the triage log. Between polls it waits on the doorbell (:mod:`firstmate.store.doorbell`), so a
durable append or a crew status line is seen at once; ``FM_POLL`` (default 15 s) only bounds the
wait, and the watcher falls back to that plain polling when the doorbell cannot be bound.

Startup, in order (see docs/watcher.md):

1. Refuse, before touching any state, when this code lies inside a disposable checkout
   (``/.no-mistakes/worktrees/`` or a ``FM_DISPOSABLE_PATTERNS`` glob).
2. Claim the singleton, waiting at most ``FM_WATCHER_STARTUP_LOCK_BOUND`` (default 10 s). A
   healthy watcher already holding it makes this one stand down (``watcher: already running``,
   exit 0); a live holder that outlasts the bound ends the start with
   ``watcher: FAILED - startup lock held by live pid <P>``. The owner record the claim writes is
   the startup safe point. The predecessor's beacon is removed at once, so health requires this
   watcher's own first poll.
3. Publish downtime when the previous watcher never closed (it was killed: its open-cycle mark
   is still in the store), then mark this cycle open.

Signals: HUP, TERM and INT at any point run the cleanup - stop a running check's process group,
publish downtime (queue-lock wait bounded by ``FM_WATCHER_CLEANUP_LOCK_BOUND``), release the
singleton - and exit 128 + signal. Once the close of an actionable event begins, these signals
are blocked: the reason line, the delivery record and the release cannot be interrupted. A stop
that lands before the claim still announces the supervision that never started as down, unless
a watcher of this home holds the singleton (:func:`firstmate.store.downtime.publish_unwatched`);
the arm itself signals its child only from the safe point on.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import stat
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO, runtime_checkable

import attrs

from firstmate.base import stopsignals
from firstmate.base.envnum import env_float
from firstmate.base.errors import FirstmateError, LockTimeout
from firstmate.base.exitcodes import ExitCode
from firstmate.base.stopsignals import Stopped
from firstmate.store.downtime import OPEN_KEY
from firstmate.store.home import Home, open_private, resolve_root
from firstmate.watch.cycleenv import (
    DEFAULT_CLEANUP_BOUND,
    PREDECESSOR_ENV,
    cleanup_lock_bound,
    predecessor_arm_pid,
)
from firstmate.watch.directline import DirectOut, deliver
from firstmate.watch.grounds import code_dir, disposable_checkout, file_id, missing_ground

if TYPE_CHECKING:
    from firstmate.store.database import Store
    from firstmate.store.doorbell import Doorbell
    from firstmate.store.ledgers import BoundedLog
    from firstmate.store.locks import FileLock
    from firstmate.watch.sources.base import PollContext, Source, Wake

DEFAULT_POLL = 15.0
DEFAULT_STARTUP_BOUND = 10.0
#: A watcher never waits less than this between polls (a source naming a past deadline).
MIN_WAIT = 0.01
#: The env var naming the pipe the arm listens on for "first poll done".
READY_FD_ENV = "FM_WATCH_READY_FD"


@runtime_checkable
class CoversQueue(Protocol):
    """A source whose wake stands for queued rows: the watermark advances to :meth:`covered_seq`."""

    def covered_seq(self, wake: Wake) -> int: ...


# --- the watcher ---------------------------------------------------------------------------------


@attrs.define(eq=False)
class Watcher:
    """One watcher cycle. :meth:`run` returns the process exit status."""

    env: Mapping[str, str]
    out: TextIO
    err: TextIO
    home: Home | None = None
    lock: FileLock | None = None
    db: Store | None = None
    bell: Doorbell | None = None
    sources: list[Source] = attrs.Factory(list)
    identity: str = ""
    #: The newest queue sequence at the startup safe point (see PollContext.startup_seq).
    startup_seq: int | None = None
    #: (device, inode) of the database this cycle opened: one removed or replaced under it
    #: would leave the watcher reading a file nobody appends to any more.
    db_file: tuple[int, int] | None = None
    #: Set once the close of an actionable event begins (signals are blocked from then on).
    closing: bool = False
    _triage: BoundedLog | None = None
    _noted: set[str] = attrs.Factory(set)
    _ready_fd: int | None = None
    #: Direct mode's descriptors (:mod:`firstmate.watch.directline`), until the close.
    _direct: DirectOut | None = None
    _beacon: str | None = None  # (its path, made once: the loop touches it on every poll)
    _out_fd: int | None = None  # (stdout's: one write a line, no text layer on a wake's path)

    def __attrs_post_init__(self) -> None:
        # The ready pipe is ours alone: take it out of the environment our checks inherit.
        env = dict(self.env)
        raw = env.pop(READY_FD_ENV, "").strip()
        self._direct = DirectOut.from_env(env)
        self.env = env
        with contextlib.suppress(AttributeError, OSError, ValueError):
            self.out.flush()
            self._out_fd = self.out.fileno()
        if raw.isascii() and raw.isdigit() and int(raw) > 2:
            self._ready_fd = int(raw)
            with contextlib.suppress(OSError):
                os.set_inheritable(self._ready_fd, False)

    # --- entry -----------------------------------------------------------------------------

    def run(self) -> int:
        code = code_dir()
        refused = disposable_checkout(code, self.env)
        if refused is not None:
            self._say(f"watcher: FAILED - refusing to run from a disposable checkout: {refused}")
            return ExitCode.FAILED
        from firstmate.base.quickgate import crew_marker

        crew = crew_marker(self.env)
        if crew is not None:
            self._say(f"watcher: FAILED - refusing to run in a crew's session ({crew}): only "
                      "the captain watches; report with fm crew status")
            return ExitCode.FAILED
        self.home = Home(resolve_root(self.env)).ensure(announce=self.env)
        claimed = self._claim()
        if claimed is not None:
            return claimed
        started = self._open_cycle()
        if started is not None:
            return self._finish(started, publish=False)
        self._load_sources()
        from firstmate.store.doorbell import Doorbell

        self.bell = Doorbell(self.home)
        self.bell.open()
        return self._loop(code)

    def stopped(self, signum: int) -> int:
        """The HUP/TERM/INT cleanup: stop a running check, publish downtime, release, 128+n."""
        stopsignals.block()
        if self.closing:  # pragma: no cover - signals are blocked during a close
            return ExitCode.FAILED
        with contextlib.suppress(Exception):
            from firstmate.store import checks

            checks.kill_running()
        name = signal.Signals(signum).name
        if self.lock is not None and self.lock.held:
            self._note_line(f"watcher: stopped by {name}; publishing downtime and releasing "
                            "the lock")
            return self._finish(128 + signum, publish=True)
        # Before the claim: nothing of ours to release, but the supervision this start was to
        # establish never began, and that must not go unannounced.
        from firstmate.store.downtime import publish_unwatched_for

        self._note_line(f"watcher: stopped by {name} before it claimed the singleton; "
                        "announcing the downtime unless a watcher holds it")
        with contextlib.suppress(FirstmateError, OSError):
            home = self.home if self.home is not None else Home(resolve_root(self.env))
            publish_unwatched_for(home, self.env, bound=cleanup_lock_bound(
                self.env.get("FM_WATCHER_CLEANUP_LOCK_BOUND")))
        return self._finish(128 + signum, publish=False)

    # --- startup -----------------------------------------------------------------------------

    def _claim(self) -> int | None:
        """Take the singleton; None when held, else the exit status of a start that ended."""
        from firstmate.store.health import LOCK_NAME, ROLE, watcher_health
        from firstmate.store.identity import current
        from firstmate.store.locks import FileLock

        assert self.home is not None
        home = self.home
        self.lock = FileLock(home.lock_path(LOCK_NAME), ROLE, home.root)
        bound = env_float(self.env, "FM_WATCHER_STARTUP_LOCK_BOUND", DEFAULT_STARTUP_BOUND)
        deadline = time.monotonic() + bound
        while True:
            left = deadline - time.monotonic()
            try:
                self.lock.acquire(max(0.0, min(0.1, left)))
                break
            except LockTimeout as exc:
                health = watcher_health(home, self.env)
                if health.healthy:
                    self._say(f"watcher: already running pid={health.pid}")
                    return ExitCode.OK
                if time.monotonic() >= deadline:
                    holder = exc.holder_pid or health.pid
                    who = f"live pid {holder}" if holder else "another process"
                    self._say(f"watcher: FAILED - startup lock held by {who}")
                    return ExitCode.FAILED
        self.identity = current().token()
        # The predecessor's beacon must not vouch for this watcher.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(home.beacon)
        return None

    def _open_cycle(self) -> int | None:
        """Publish the downtime a killed predecessor left unpublished; mark this cycle open."""
        from firstmate.store import episodes, queue
        from firstmate.store.database import kv_get, kv_set, max_queued_seq, open_store
        from firstmate.watch.sources.resurface import StartupLockHeld

        assert self.home is not None
        self.db = open_store(self.home)
        self.db_file = file_id(self.home.db)
        bound = env_float(self.env, "FM_WATCHER_STARTUP_LOCK_BOUND", DEFAULT_STARTUP_BOUND)
        try:
            with queue.locked(self.db, timeout=bound) as conn:
                prior = (kv_get(conn, OPEN_KEY) or "").strip()
                if prior and prior != self.identity:
                    episodes.publish_downtime(conn)
                kv_set(conn, OPEN_KEY, self.identity)
                self.startup_seq = max_queued_seq(conn)
        except LockTimeout as exc:
            self._say(StartupLockHeld(exc.holder_pid).message)
            return ExitCode.FAILED
        if prior and prior != self.identity:
            self._log(f"watcher: predecessor {prior} ended without closing; downtime published")
        return None

    def _load_sources(self) -> None:
        from firstmate.plugin import manager as plugins
        from firstmate.watch.sources.queued import QueuedSource
        from firstmate.watch.sources.resurface import ResurfaceSource, from_env

        assert self.home is not None
        sources = list(plugins.load(self.env).watch_sources(self.home, self.env))
        # The watcher's own two sources always run first, in this order, exactly once.
        if not any(isinstance(s, ResurfaceSource) for s in sources):
            sources.insert(0, from_env(self.home, self.env))
        if not any(isinstance(s, QueuedSource) for s in sources):
            sources.insert(1, QueuedSource(self.home))
        self.sources = sources

    # --- polling -----------------------------------------------------------------------------

    def _loop(self, code: Path) -> int:
        from firstmate.store.health import grace
        from firstmate.watch.sources.base import PollContext
        from firstmate.watch.sources.handover import HeldWakes
        from firstmate.watch.sources.queued import QueuedSource

        assert self.home is not None and self.bell is not None
        home = self.home
        poll_every = env_float(self.env, "FM_POLL", DEFAULT_POLL)
        # Touch the beacon well inside the grace even when FM_POLL is longer than it.
        poll_every = min(poll_every, max(grace(self.env) / 3, 0.05))
        successor = predecessor_arm_pid(self.env) is not None
        # Each poll runs only what is due: every source each FM_POLL (the full poll), a source
        # whose own deadline came, and on a ring the sources that watch what rings the doorbell
        # (queued rows, checks, crew lines). So slow timer-driven work (pane reads) never stands
        # between an append and its wake, and a deadline of one source costs no other's work.
        on_bell = [s for s in self.sources if getattr(s, "doorbell", False)]
        # The watcher's own queued source, when a ring polls it first: see the answer below.
        queued = on_bell[0] if on_bell and type(on_bell[0]) is QueuedSource else None
        bell = self.bell
        self._beacon, db_path = os.fspath(home.beacon), os.fspath(home.db)  # (made once)
        code_path = os.fspath(code)
        due: dict[int, float] = {}
        # Wakes that wait for the primary's drain of the wake before (a handling successor's).
        held = HeldWakes(self.db)
        full_at = next_at = 0.0
        rang = False
        number = 0

        def context() -> PollContext:  # (this poll's: its time, number and kind as they are)
            return PollContext(home=home, env=self.env, now=now, poll=number, triage=self._log,
                               handling_successor=successor, beat=self._touch_beacon,
                               startup_seq=self.startup_seq, rung=bell.pending,
                               bell_fd=bell.fileno(), full=full)

        while True:
            number += 1
            now = time.time()
            # A poll that only answers the doorbell touches the beacon after its sources: a
            # wake removes the beacon anyway, and every other poll (one at least each FM_POLL,
            # well inside the grace) touches it first.
            if rang and now < next_at and not held.held:  # (the usual answer to a ring)
                chosen, full, answer_only = on_bell, False, True  # (nothing due, nothing held)
            else:
                released = held.released(rang, now)
                full = now >= full_at
                if full:
                    chosen, full_at = self.sources, now + poll_every
                else:
                    chosen = [s for s in self.sources if (rang and s in on_bell)
                              or due.get(id(s), math.inf) <= now or id(s) in released]
                if held.held:
                    chosen = [s for s in chosen if id(s) not in held.held]
                answer_only = number > 1 and all(s in on_bell for s in chosen)
            if not answer_only:
                self._touch_beacon()
            if number == 1:
                self._notify_ready()
            # The grounds in two stats: the database file this cycle opened, found by its
            # path, proves the home and state/ above it are there; only when it is not is
            # each ground looked at, to name the one that is gone.
            if (self.db_file is None or file_id(db_path) != self.db_file
                    or not os.path.isdir(code_path)):
                ended = self._grounds_gone(code)
                if ended is not None:
                    return ended
            looked = None
            if chosen is on_bell and queued is not None:
                # The usual answer to a ring looks at the queued rows before anything else is
                # made: a row it wakes for is closed on at once (the row is the wake's record).
                try:
                    found = queued.look(successor, context)
                except Exception:  # (the pass below looks again, and names the failure)
                    found = None
                else:
                    looked = queued
                if found is not None:
                    return self._close(queued, found, None)
            ctx = context()
            for index, source in enumerate(chosen):
                if source is looked:
                    continue  # (looked at just now; a ring during the pass looks again)
                if index and self.bell.pending():
                    # A ring during this pass (a queued row, a crew line) is answered before the
                    # next source: the doorbell sources already polled look again, in order,
                    # so a row never waits for a slow pass over the fleet, and a doorbell source
                    # still comes before the later ones, as in any poll.
                    self.bell.wait(0)
                    again = attrs.evolve(ctx, now=time.time(), full=False)
                    for early in chosen[:index]:
                        if early in on_bell and id(early) not in held.held:
                            wake = self._poll(early, again)
                            if isinstance(wake, int):
                                return wake
                            if wake is not None and not held.holds(early, wake, again):
                                return self._close(early, wake, again)
                wake = self._poll(source, ctx)
                if isinstance(wake, int):
                    return wake
                if wake is not None and not held.holds(source, wake, ctx):
                    return self._close(source, wake, ctx)
            if answer_only:
                self._touch_beacon()
            due = self._dues(ctx)
            due.update(held.held)  # (a held source's own deadline waits for the hold too)
            next_at = min([full_at, *due.values()])
            rang = bell.wait(max(MIN_WAIT, next_at - time.time()))

    def _grounds_gone(self, code: Path) -> int | None:
        """End the cycle when a ground is gone (home, state/, this code, the database file
        this cycle opened): the exit status; None when every one is there."""
        assert self.home is not None
        home = self.home
        gone = missing_ground(home, code)
        if gone is not None:
            self._note_line(f"watcher: {gone} no longer exists; ending this cycle")
            # Downtime is published only where it can land: with state/ gone there is no
            # store left to record it in (only this code directory may have gone).
            return self._finish(ExitCode.STATE, publish=os.path.isdir(home.state))
        if self.db_file is not None and file_id(home.db) != self.db_file:
            self._say(f"watcher: FAILED - {home.db} was removed or replaced while the "
                      "watcher ran; ending this cycle (the next fm arm opens the current "
                      "database)")
            # Nothing is published: the file this cycle holds is no longer the queue.
            return self._finish(ExitCode.STATE, publish=False)
        return None

    def _poll(self, source: Source, ctx: PollContext) -> Wake | int | None:
        try:
            return source.poll(ctx)
        except Exception as exc:  # one broken source must not blind the others
            # (imported here, not on every poll: a ring's answer runs no import statement)
            from firstmate.watch.sources.resurface import StartupLockHeld

            if isinstance(exc, StartupLockHeld):
                self._say(exc.message)
                return self._finish(ExitCode.FAILED, publish=True)
            name = getattr(source, "name", type(source).__name__)
            text = exc.message if isinstance(exc, FirstmateError) else f"{type(exc).__name__}: {exc}"
            self._note_once(f"{name}:{text}", f"watcher: source {name} failed: {text}")
            return None

    def _dues(self, ctx: PollContext) -> dict[int, float]:
        """Each source's own next deadline (by id), for those that name one."""
        found: dict[int, float] = {}
        for source in self.sources:
            try:
                when = source.next_due(ctx)
            except Exception:  # a broken deadline only costs a full poll interval
                continue
            if when is not None:
                found[id(source)] = when
        return found

    def _touch_beacon(self) -> None:
        assert self.home is not None
        try:
            fd = open_private(self._beacon or self.home.beacon, os.O_WRONLY | os.O_CREAT)
        except FirstmateError:
            return  # the ground check right after names what is wrong
        try:
            os.utime(fd)
        finally:
            os.close(fd)

    def _notify_ready(self) -> None:
        """Tell the arm that spawned us (through its pipe) that the first poll has begun."""
        fd = self._ready_fd
        self._ready_fd = None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, f"ready {os.getpid()}\n".encode())
        with contextlib.suppress(OSError):
            os.close(fd)

    # --- closing -----------------------------------------------------------------------------

    def _close(self, source: Source, wake: Wake, ctx: PollContext | None) -> int:
        """Make *wake* durable, print its reason line, record the delivery, release, exit 0.
        *ctx* None: the queued source's wake from a ring's answer (its commit does nothing)."""
        stopsignals.block()
        self.closing = True
        assert self.db is not None and self.home is not None
        reason = " ".join(wake.reason.split()) or wake.kind
        covered = 0
        if wake.append:
            from firstmate.store import queue

            try:
                covered = queue.append(self.db, wake.kind, wake.key, reason)
            except FirstmateError as exc:
                self._say(f"watcher: FAILED - could not queue the wake ({exc.message})")
                return self._finish(ExitCode.FAILED, publish=True)
        try:
            if ctx is not None:
                source.commit(wake, ctx)
        except Exception as exc:  # the row is durable; a marker costs a repeat
            self._note_line(f"watcher: source {source.name} could not commit its markers: {exc}")
        # The beacon goes first, so nobody attaches to a watcher that is already closing.
        with contextlib.suppress(OSError):
            os.unlink(self._beacon or self.home.beacon)
        printed = deliver(self._direct, self._say, reason)
        self._direct = None
        # Whoever reads the line should run before this close's own work (a hint only).
        with contextlib.suppress(OSError, AttributeError):
            os.sched_yield()
        from firstmate.watch.sources.resurface import ResurfaceSource

        if isinstance(source, CoversQueue):
            covered = max(covered, source.covered_seq(wake))
        if wake.kind != "heartbeat":
            self._reset_heartbeat()
        preserve = isinstance(source, ResurfaceSource) and source.recovered is not None
        self._record_close(reason, covered, preserve)
        self._release()
        return ExitCode.OK if printed else ExitCode.FAILED

    def _reset_heartbeat(self) -> None:
        assert self.home is not None
        try:
            from firstmate.watch.sources.heartbeat import reset_streak

            reset_streak(self.home)
        except (OSError, FirstmateError) as exc:
            self._note_line(f"watcher: could not reset the heartbeat streak: {exc}")

    def _record_close(self, reason: str, covered: int, preserve: bool) -> None:
        """Delivery record + watermark (+ downtime, unless preserving a resurfaced episode)."""
        from firstmate.store import deliveries, episodes, queue
        from firstmate.store.database import kv_set
        from firstmate.watch.sources.queued import advance_watermark

        assert self.db is not None
        pid = os.getpid()
        bound = cleanup_lock_bound(self.env.get("FM_WATCHER_CLEANUP_LOCK_BOUND"))
        try:
            with queue.locked(self.db, timeout=bound) as conn:
                deliveries.record_locked(conn, pid, self.identity, reason)
                advance_watermark(conn, covered)
                if not preserve:
                    episodes.publish_downtime(conn)
                kv_set(conn, OPEN_KEY, "")
            return
        except (LockTimeout, FirstmateError) as exc:
            self._note_line(self._unpersisted(exc, bound))
        # Without the queue lock: still record the delivery (the open mark stays, so the next
        # watcher publishes the downtime this close could not).
        try:
            with self.db.transaction(timeout=max(10.0, float(bound))) as conn:
                deliveries.record_locked(conn, pid, self.identity, reason)
                advance_watermark(conn, covered)
        except FirstmateError as exc:
            self._note_line(f"watcher: could not record the delivery: {exc.message}")

    def _finish(self, status: int, *, publish: bool) -> int:
        """End a cycle that delivered nothing: publish downtime (bounded), release, *status*."""
        stopsignals.block()
        held = self.lock is not None and self.lock.held
        if publish and held and self.db is None and self.home is not None and self.home.db.is_file():
            # Stopped between the claim (the safe point) and the store's opening.
            from firstmate.store.database import open_store

            with contextlib.suppress(FirstmateError):
                self.db = open_store(self.home)
        if publish and held and self.db is not None:
            from firstmate.store import episodes, queue
            from firstmate.store.database import kv_get, kv_set

            if self.home is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self.home.beacon)
            bound = cleanup_lock_bound(self.env.get("FM_WATCHER_CLEANUP_LOCK_BOUND"))
            try:
                with queue.locked(self.db, timeout=bound) as conn:
                    episodes.publish_downtime(conn)
                    if (kv_get(conn, OPEN_KEY) or "") == self.identity:
                        kv_set(conn, OPEN_KEY, "")
            except (LockTimeout, FirstmateError) as exc:
                self._note_line(self._unpersisted(exc, bound))
        self._release()
        return status

    def _unpersisted(self, exc: FirstmateError, bound: int) -> str:
        if isinstance(exc, LockTimeout) and exc.holder_pid:
            why = f"the queue lock stayed held by live pid {exc.holder_pid} for {bound}s"
        else:
            why = exc.message
        return (f"watcher: recovery state could not be persisted ({why}); "
                "the next watcher publishes the downtime")

    def _release(self) -> None:
        for source in self.sources:  # (a tmux call under way, a store connection)
            closer = getattr(source, "close", None)
            if callable(closer):
                with contextlib.suppress(Exception):
                    closer()
        if self.home is not None and self.lock is not None and self.lock.held:
            with contextlib.suppress(OSError):
                os.unlink(self.home.beacon)
        if self.bell is not None:
            with contextlib.suppress(OSError):
                self.bell.close()
        if self.lock is not None:
            with contextlib.suppress(OSError):
                self.lock.release()
        if self.db is not None:
            with contextlib.suppress(Exception):
                self.db.close()

    # --- output --------------------------------------------------------------------------------

    def _say(self, line: str) -> bool:
        """One line on stdout, flushed; False when stdout is gone."""
        try:
            if self._out_fd is None:
                self.out.write(line + "\n")
                self.out.flush()
                return True
            data = (line + "\n").encode("utf-8", "surrogateescape")
            while data:
                data = data[os.write(self._out_fd, data):]
        except (OSError, ValueError):
            return False
        return True

    def _log(self, line: str) -> None:
        """One triage-log line (absorbed events and notes); never raises."""
        if self.home is None:
            return
        try:
            if self._triage is None:
                from firstmate.store.ledgers import triage_log

                self._triage = triage_log(self.home, self.env)
            self._triage.append(line)
        except (OSError, FirstmateError):
            pass

    def _note_line(self, line: str) -> None:
        """A diagnostic: stderr and the triage log."""
        with contextlib.suppress(OSError, ValueError):
            self.err.write(line + "\n")
            self.err.flush()
        self._log(line)

    def _note_once(self, key: str, line: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            self._note_line(line)


def run(env: Mapping[str, str] | None = None, out: TextIO | None = None,
        err: TextIO | None = None) -> int:
    """Run one watcher cycle in this process; returns its exit status."""
    watcher = Watcher(dict(os.environ if env is None else env),
                      sys.stdout if out is None else out, sys.stderr if err is None else err)
    stopsignals.block()  # (the arm spawns us with them held; anyone else may not have)
    previous = stopsignals.install(unblock_now=False)
    try:
        try:
            stopsignals.unblock()  # a TERM pending since our spawn is handled right here
            return watcher.run()
        except Stopped as stop:
            return watcher.stopped(stop.signum)
        except FirstmateError as exc:
            stopsignals.block()  # this end is already under way: a late stop waits for it
            # On stdout, as a FAILED line, so the arm relays it at once.
            watcher._say(f"watcher: FAILED - {' '.join(exc.message.split())}")
            return watcher._finish(int(exc.exit_code), publish=True)
    finally:
        stopsignals.restore(previous)


__all__ = [
    "DEFAULT_CLEANUP_BOUND",
    "OPEN_KEY",
    "PREDECESSOR_ENV",
    "READY_FD_ENV",
    "CoversQueue",
    "Stopped",
    "Watcher",
    "cleanup_lock_bound",
    "code_dir",
    "disposable_checkout",
    "missing_ground",
    "predecessor_arm_pid",
    "run",
]
