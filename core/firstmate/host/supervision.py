"""The supervision host: parks in place of the plain arm and handles away-mode wakes headlessly.

Opt-in per home: ``config/supervision-host`` exists (``fm host enable`` writes it). A re-arm
owner of a hook-armed primary runs ``fm host park [--restart]`` where it would run ``fm arm``; the
host's stdout keeps the arm's shape (the first arm's status line, then what main must see).

Attended (no away record), the host is a pass-through arm: the close's reason line is printed and
the host exits 0, exactly like ``fm arm``.

Away, on each actionable close the host

1. starts the successor cycle (``fm arm`` with ``FM_WATCH_PREDECESSOR_ARM_PID`` naming the
   closed arm), waits for its readiness line and confirms the handoff
   (:func:`firstmate.continuity.handoffconfirm.confirm_with_arm`, retried once), so the fleet stays watched;
2. computes the branch-claimable rows (unclaimed usable rows; check rows too, since away);
3. activates and publishes a grant bound to the host process;
4. runs one bounded headless engine turn (``FM_SUPERVISION_ACTOR=branch``) that drains as the
   branch, handles, reports outcomes (``fm host report``) and acknowledges;
5. counts the wake handled only if the turn exited 0, reported at least one outcome for this
   grant, and left none of its granted rows queued. The grant is dropped either way.

A handled wake never reaches main: the host settles the successor handoff under the queue lock
(a row left for main makes the episode pending downtime, so it is recovered; a handling episode
of this handoff with nothing left is retired) and parks on the successor. Any failure hands the
wake back to main: the close's reason line(s), then one ``supervision-host: <why>`` line, exit 0.
By default the successor is stopped first (main's next turn end starts from the state it would
have without the host); with ``handback = acknowledged`` it keeps running and the hand-back is
re-delivered until main acknowledges the handed-back rows themselves: the retry state is durable
(``kv`` ``host.handback``), a park that finds a delivery due re-delivers at once, and a park that
finds one not yet due parks normally and re-delivers when its backoff timer expires
(:func:`retry_delay`).

Before the hook timeout (``FM_SUPERVISION_HOST_BOUNDARY`` seconds after the park began) the host
stops at a cycle boundary: it stops the home's watcher and prints
``supervision-host: cycle boundary``. It starts no engine turn that could outlast the boundary.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any, TextIO

import attrs

from firstmate.base.errors import FirstmateError
from firstmate.base.names import fm_module_argv
from firstmate.host.config import (
    CONFIG_NAME,
    ENGINE_ENV,
    GENERATION_ENV,
    NO_ENGINE,
    RETRIES_ENV,
    RETRY_ENV,
    RETRY_MAX_ENV,
    HostConfig,
    config_path,
    default_engine,
    disable,
    enable,
    load_config,
    require_engine,
    retry_delay,
)
from firstmate.host.engine import (
    ENGINE_GRACE,
    EngineRun,
    claimable_rows,
    engine_prompt,
    judge_turn,
    run_engine,
    still_queued,
)
from firstmate.host.events import events, events_log, host_log, outcome_count, record_event, report
from firstmate.host.handback import HANDBACK_KEY, HandbackRetry
from firstmate.store.home import Home
from firstmate.store.ledgers import BoundedLog

#: How long the host waits for a predecessor host to stand down.
SUPERSEDE_WAIT = 15.0
HOST_PID_ENV = "FM_SUPERVISION_HOST_PID"
PREDECESSOR_ENV = "FM_WATCH_PREDECESSOR_ARM_PID"


# --- the host ------------------------------------------------------------------------------------


class Interrupted(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum: int, frame: FrameType | None) -> None:
    from firstmate.base import stopsignals

    stopsignals.block()  # one stop is enough: the cleanup that follows runs uninterrupted
    raise Interrupted(signum)


@attrs.frozen(eq=False)
class AwayResult:
    handled: bool
    why: str
    successor: Any = None
    rows: tuple[int, ...] = ()


@attrs.define(eq=False)
class Host:
    """One park of the supervision host (``fm host park``)."""

    home: Home
    env: dict[str, str]
    out: TextIO
    config: HostConfig
    log: BoundedLog
    started: float = attrs.Factory(time.monotonic)
    arms: list[Any] = attrs.Factory(list)
    #: Arm children deliberately left running (acknowledged hand-back).
    kept: list[Any] = attrs.Factory(list)
    grant: tuple[int, str] | None = None
    #: The lines of a re-delivery that fell due while parked.
    due: list[str] = attrs.Factory(list)
    #: The outstanding acknowledged hand-back (the wait re-checks it at every tick).
    handback: HandbackRetry = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.handback = HandbackRetry(self.home, self.env, self.config, self.note)

    # --- output and bookkeeping ------------------------------------------------------------

    def say(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.out.write(line + "\n")
            self.out.flush()

    def note(self, line: str) -> None:
        with contextlib.suppress(OSError, FirstmateError):
            self.log.append(f"pid={os.getpid()} {line}")

    def boundary_left(self) -> float:
        return self.config.boundary - (time.monotonic() - self.started)

    def store(self) -> Any:
        from firstmate.store.database import Store

        return Store(self.home)

    # --- arms -------------------------------------------------------------------------------

    def launch_arm(self, predecessor: int | None, *, restart: bool = False) -> Any:
        from firstmate.continuity.armchild import ArmChild
        from firstmate.continuity.watchchild import child_env
        from firstmate.plugin.handoff import ArmRef

        env = child_env(self.env)
        env.pop(PREDECESSOR_ENV, None)
        if predecessor is not None:
            env[PREDECESSOR_ENV] = str(predecessor)
        argv = fm_module_argv("arm", *(["--restart"] if restart else []))
        child = ArmChild.launch(argv, env, lambda pid: ArmRef(pid, predecessor, "host"))
        self.arms.append(child)
        self.note(f"launched arm={child.pid} predecessor={predecessor}")
        return child

    def readiness(self, child: Any) -> Any:
        """The arm's first started/attached/failed line (a Readiness), None at the timeout."""
        from firstmate.continuity.armchild import EXITED, TIMEOUT
        from firstmate.plugin.handoff import Readiness

        deadline = time.monotonic() + self.config.ready_timeout
        index = 0
        while True:
            found, line = child.next_line(index, deadline)
            if found == TIMEOUT:
                return None
            if found == EXITED:
                return Readiness(False, "failed", line="")
            index += 1
            reading = Readiness.parse(line)
            if reading.kind != "other":
                self.note(f"arm={child.pid}: {line}")
                return reading

    def retire(self, child: Any) -> None:
        """TERM an arm of ours and wait (bounded): an arm that started its watcher stops it."""
        if child.alive:
            child.terminate()
            if not child.wait_exit(20.0):
                child.kill()
                child.wait_exit(10.0)

    def wait_close(self, child: Any) -> str:
        """``reason`` (a reason line arrived), ``failed`` (settled without one), ``boundary``, or
        ``handback`` (an outstanding hand-back fell due: its lines are in :attr:`due`)."""
        while True:
            left = self.boundary_left()
            if left <= 0:
                return "boundary"
            if child.wait_reason(min(left, 1.0)):
                return "reason"
            if child.settled:
                return "reason" if child.reasons() else "failed"
            if self.handback.retrying:
                lines = self.handback.check()
                if lines is not None:
                    self.due = lines
                    return "handback"

    def stop_watcher(self) -> None:
        from firstmate.continuity.watchchild import child_env

        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(fm_module_argv("arm", "--stop"),
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                           env=child_env(self.env), check=False)

    # --- the park ---------------------------------------------------------------------------

    def park(self, restart: bool) -> int:
        from firstmate.host import away

        current = self.launch_arm(None, restart=restart)
        ready = self.readiness(current)
        if ready is None or not ready.ready:
            line = (ready.line if ready is not None and ready.line else
                    f"watcher: FAILED - supervision host: arm pid={current.pid} printed no status"
                    f" line within {self.config.ready_timeout:g}s")
            self.say(line)
            self.note(f"first arm not ready: {line}")
            self.retire(current)
            return 1
        self.say(ready.line)
        while True:
            how = self.wait_close(current)
            reasons = [line for line, _ in current.reasons()]
            if how == "boundary" and not reasons:
                return self.cycle_boundary(current)
            if how == "handback":
                # The fleet stays watched: this cycle keeps running for main's next park.
                self.kept.append(current)
                for line in self.due:
                    self.say(line)
                return 0
            if how == "failed":
                failed = [x for x in current.lines() if x.startswith("watcher: FAILED")]
                for line in failed or [f"watcher: FAILED - supervision host: arm pid="
                                       f"{current.pid} ended without a reason line"]:
                    self.say(line)
                self.note(f"arm={current.pid} closed without a wake")
                current.wait_exit(10.0)
                code = current.returncode
                return code if isinstance(code, int) and 0 < code < 128 else 1
            if not away.is_away(self.home):
                self.note(f"attended close arm={current.pid}: {' | '.join(reasons)}")
                for line in reasons:
                    self.say(line)
                current.wait_exit(10.0)
                return 0
            refused = self.lock_refused()
            if refused is not None:
                self.note(f"standing down at a close: {refused}")
                return 0
            result = self.away_close(current, reasons)
            if result.handled:
                current = result.successor
                continue
            return self.hand_back(reasons, result)

    def lock_refused(self) -> str | None:
        from firstmate.continuity.session_lock import recheck_owned

        try:
            return recheck_owned(self.home, self.env)
        except FirstmateError as exc:
            return exc.message

    def cycle_boundary(self, current: Any) -> int:
        self.retire(current)
        self.stop_watcher()
        self.note("cycle boundary: stopped the watcher")
        self.say("supervision-host: cycle boundary")
        return 0

    # --- one away close ---------------------------------------------------------------------

    def away_close(self, closed: Any, reasons: Sequence[str]) -> AwayResult:
        self.note(f"away close arm={closed.pid}: {' | '.join(reasons)}")
        closed.wait_exit(10.0)
        successor = self.launch_arm(closed.pid)
        ready = self.readiness(successor)
        superseded = bool(successor.reasons())
        if not superseded and (ready is None or not ready.ready or not successor.alive):
            why = (f"successor cycle not verified: {ready.line}" if ready is not None and ready.line
                   else f"successor cycle not verified: arm pid={successor.pid} printed no status "
                        f"line within {self.config.ready_timeout:g}s")
            self.retire(successor)
            return AwayResult(False, why, None)
        handoff_gen = None
        if not superseded and ready.kind == "started" and ready.generation:
            result = self.confirm(closed, reasons, successor, ready)
            if not result.ok and not successor.reasons():
                return AwayResult(False, f"handoff not confirmed: {result.message}", successor)
            handoff_gen = ready.generation
        if self.boundary_left() < self.config.turn_timeout + ENGINE_GRACE + 5.0:
            return AwayResult(False, "the cycle boundary is too close for an engine turn",
                              successor)
        from firstmate.base.errors import LockTimeout
        from firstmate.store import queue, queuestatus

        db = self.store()
        try:
            with queue.locked(db, timeout=10.0) as conn:
                seqs = claimable_rows(conn, away=True)
                mine = queuestatus.pending_count(conn, "main")
        except LockTimeout:
            return AwayResult(False, "the queue lock stayed busy; the rows stay queued",
                              successor)
        finally:
            db.close()
        if not seqs:
            if mine:
                return AwayResult(False, f"{mine} queued row(s) already belong to main",
                                  successor)
            self.note("nothing left to handle: the rows of this close are gone")
            self.settle(handoff_gen)
            return AwayResult(True, "nothing left", successor)
        return self.engine_turn(reasons, seqs, successor, handoff_gen)

    def confirm(self, closed: Any, reasons: Sequence[str], successor: Any, ready: Any) -> Any:
        from firstmate.continuity.handoffconfirm import confirm_with_arm
        from firstmate.plugin.handoff import Close, Handoff, Session

        handoff = Handoff(
            close=Close(tuple(reasons), closed.pid, None), successor_arm_pid=successor.pid,
            watcher_pid=ready.watcher_pid, generation=ready.generation, harness="host",
            session=Session(self.home, "host", self.env),
        )
        result = confirm_with_arm(handoff)
        if not result.ok:
            result = confirm_with_arm(handoff)
        self.note(f"handoff generation={ready.generation} watcher={ready.watcher_pid} "
                  f"ok={result.ok} {result.message}")
        return result

    def engine_turn(self, reasons: Sequence[str], seqs: Sequence[int], successor: Any,
                    handoff_gen: str | None) -> AwayResult:
        from firstmate.continuity.watchchild import child_env
        from firstmate.host import away
        from firstmate.store import grants
        from firstmate.store.queue import ACTOR_ENV

        generation = f"host.{os.getpid()}.{int(time.time())}.{os.urandom(3).hex()}"
        db = self.store()
        try:
            grants.activate(db, os.getpid(), generation)
            self.grant = (os.getpid(), generation)
            grants.publish(db, generation, list(seqs))
        except FirstmateError as exc:
            self.drop_grant()
            db.close()
            return AwayResult(False, f"grant refused: {exc.message}", successor)
        record = away.read_record(self.home)
        contract = record.contract if record is not None else away.DEFAULT_CONTRACT
        env = child_env(self.env)
        env.pop(PREDECESSOR_ENV, None)
        env.update({ACTOR_ENV: "branch", GENERATION_ENV: generation, HOST_PID_ENV: str(os.getpid()),
                    "FM_HOME": str(self.home.root)})
        prompt = engine_prompt(reasons, seqs, generation, contract)
        self.note(f"engine turn grant={generation} rows={','.join(map(str, seqs))}")
        run = run_engine(self.config.engine, prompt, env, self.config.turn_timeout)
        try:
            with db.reading() as conn:
                left = still_queued(conn, seqs)
        except FirstmateError:
            left = list(seqs)
        finally:
            db.close()
        outcomes = outcome_count(self.home, generation, self.env)
        self.drop_grant()
        handled, why = judge_turn(run, outcomes, left, self.config.turn_timeout)
        self.note(f"engine turn grant={generation} exit={run.returncode} timed_out={run.timed_out}"
                  f" outcomes={outcomes} left={left} -> {why}; output: {run.output[-400:]}")
        record_event(self.home, "turn", self.env, generation=generation, rows=list(seqs),
                     reasons=" | ".join(reasons), handled=handled, why=why, outcomes=outcomes,
                     exit=run.returncode)
        if handled:
            self.settle(handoff_gen)
        return AwayResult(handled, why, successor, tuple(seqs))

    def drop_grant(self) -> None:
        if self.grant is None:
            return
        from firstmate.store import grants

        pid, generation = self.grant
        self.grant = None
        db = self.store()
        try:
            with contextlib.suppress(FirstmateError):
                grants.deactivate(db, pid, generation)
        finally:
            db.close()

    def settle(self, handoff_gen: str | None) -> None:
        """Under the queue lock: a row left for main makes the episode recoverable; a handling
        episode of this handoff with nothing left is retired."""
        from firstmate.store import doorbell, episodes, queue, queuestatus

        db = self.store()
        changed = False
        try:
            with queue.locked(db, timeout=30.0) as conn:
                mine = queuestatus.pending_count(conn, "main")
                state = episodes.read(conn)
                if mine:
                    before = state.token() if isinstance(state, episodes.Episode) else None
                    changed = episodes.publish_downtime(conn).token() != before
                elif (queue.depth(conn) == 0 and handoff_gen is not None
                      and isinstance(state, episodes.Episode) and state.open
                      and state.kind == "handling" and state.generation == handoff_gen):
                    episodes.acknowledge(conn, handoff_gen)
        except FirstmateError as exc:
            self.note(f"settle failed: {exc.message}")
        finally:
            db.close()
        self.note(f"settled handoff generation={handoff_gen} (downtime published: {changed})")
        if changed:
            doorbell.ring(self.home)

    # --- hand-back --------------------------------------------------------------------------

    def hand_back(self, reasons: Sequence[str], result: AwayResult) -> int:
        successor = result.successor
        if successor is not None:
            if self.config.handback == "acknowledged" and successor.alive:
                self.kept.append(successor)
                self.handback.remember(reasons, result.why, result.rows)
            else:
                self.retire(successor)
        self.note(f"hand-back to main: {result.why}")
        record_event(self.home, "handback", self.env, reasons=" | ".join(reasons),
                     why=result.why)
        for line in reasons:
            self.say(line)
        self.say(f"supervision-host: {result.why}")
        return 0

    # --- teardown ---------------------------------------------------------------------------

    def cleanup(self) -> None:
        self.drop_grant()
        for child in self.arms:
            if child not in self.kept and child.alive:
                self.retire(child)


def _supersede(home: Home, lock: Any) -> str | None:
    """Take the host lock, stopping a verified predecessor host first. None, or why not."""
    from firstmate.base.errors import LockTimeout
    from firstmate.store.identity import ProcessIdentity, signal_verified

    try:
        lock.acquire(0)
        return None
    except LockTimeout:
        pass
    record = lock.holder()
    if record is not None and record.verified:
        ident = ProcessIdentity.parse(record.identity)
        if ident is not None:
            signal_verified(ident, signal.SIGTERM)
    try:
        lock.acquire(SUPERSEDE_WAIT)
    except LockTimeout as exc:
        return (f"supervision host pid {exc.holder_pid or '?'} did not stand down within "
                f"{SUPERSEDE_WAIT:g}s")
    return None


def park(restart: bool = False, env: Mapping[str, str] | None = None,
         out: TextIO | None = None) -> int:
    """``fm host park [--restart]``: the exit status (module docstring, docs/cli.md)."""
    from firstmate.host import away
    from firstmate.store.home import resolve_root

    env = dict(os.environ if env is None else env)
    out = sys.stdout if out is None else out
    home = Home(resolve_root(env)).ensure(announce=env)
    config = load_config(home, env)
    log = host_log(home, env)
    if not config.enabled:
        # Not opted in: behave exactly as the plain arm would.
        from firstmate.continuity.armrun import run as arm_run

        return arm_run(["--restart"] if restart else [], env, out)
    require_engine(config)
    host = Host(home, env, out, config, log)
    refused = host.lock_refused()
    if refused is not None:
        host.note(f"standing down: {refused}")
        sys.stderr.write(f"supervision-host: standing down - {refused}\n")
        return 0
    lock = away.host_lock(home)
    from firstmate.base import stopsignals

    # Held until inside the try, so a stop never lands between the handlers and their except.
    stopsignals.block()
    previous = stopsignals.install(_interrupt, unblock_now=False)
    try:
        stopsignals.unblock()
        why = _supersede(home, lock)
        if why is not None:
            host.say(f"watcher: FAILED - {why}")
            host.note(why)
            return 1
        # An acknowledged hand-back whose next delivery is due goes out at once; one not yet
        # due is re-checked while this park waits (Host.wait_close).
        lines = host.handback.check()
        if lines is not None:
            for line in lines:
                host.say(line)
            return 0
        if host.handback.retrying:
            host.note("an acknowledged hand-back is outstanding: parking, re-delivering it "
                      "when its retry falls due")
        try:
            return host.park(restart)
        finally:
            host.cleanup()
    except Interrupted as stop:
        name = signal.Signals(stop.signum).name
        host.note(f"interrupted by {name}")
        host.say(f"supervision-host: interrupted by {name}")
        with contextlib.suppress(BaseException):
            host.cleanup()
        return 128 + stop.signum
    finally:
        lock.release()
        stopsignals.restore(previous)


__all__ = [
    "CONFIG_NAME",
    "ENGINE_ENV",
    "GENERATION_ENV",
    "HANDBACK_KEY",
    "NO_ENGINE",
    "RETRIES_ENV",
    "RETRY_ENV",
    "RETRY_MAX_ENV",
    "AwayResult",
    "EngineRun",
    "Host",
    "HostConfig",
    "claimable_rows",
    "config_path",
    "default_engine",
    "disable",
    "enable",
    "engine_prompt",
    "events",
    "events_log",
    "host_log",
    "judge_turn",
    "load_config",
    "outcome_count",
    "park",
    "record_event",
    "report",
    "require_engine",
    "retry_delay",
    "run_engine",
    "still_queued",
]
