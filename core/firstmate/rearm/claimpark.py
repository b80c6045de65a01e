"""The claim-ledger park: a background stop hook whose exit wakes the idle session.

For a harness that runs its turn-end hook in the background after the turn and wakes the idle
session when the hook exits with a text (Claude Code's ``asyncRewake`` Stop hook: exit 2, the
text on stderr). Such hooks are not deduplicated, so the hook, in order:

1. **Gates** (:mod:`firstmate.rearm.claimgates`): a genuine primary, a session lock this
   session owns (a dead owner's is reclaimed), away mode off, something to supervise.
2. **Pacing**: a turn end after a failed turn (an API error: :attr:`ClaimLedgerPark.paced_events`)
   waits out a cooldown since the last paced claim, then re-reads away mode and need.
3. **Generation claim** (:mod:`firstmate.continuity.claimledger`): one home-scoped owner is
   admitted; an open claim of this session keeps every other hook silent, a claim of an earlier
   (dead or replaced) session, or a stuck one, is superseded.
4. **Foreground arm** inside the hook's process tree, a bounded number of attempts. An
   actionable close: the continuity engine launches the handling successor detached, waits
   for its status line and confirms the handoff, then the hook answers with the wake. A
   non-actionable close on a healthy watcher is benign: the hook ends silently.
5. **Failure episodes** (:mod:`firstmate.rearm.claimnotice`): FAILED once, then STILL
   FAILING, then an alarm after which the hook stays silent until a positive recovery.
6. **Signals**: HUP/TERM/INT (the harness's hook timeout) answer with an INTERRUPTED notice,
   so the session is never left blind by a silently killed hook.

The turn-end guard cooperates through the same ledger (:attr:`ClaimLedgerPark.guard` is the
harness's ``GuardProfile``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from firstmate.base import stopsignals
from firstmate.base.envnum import env_int
from firstmate.continuity import claimledger
from firstmate.continuity.claimledger import Claim
from firstmate.plugin.harness import GuardProfile, HarnessInfo, HookOutcome
from firstmate.rearm import claimgates
from firstmate.rearm.claimnotice import (
    Notice,
    failure_banner,
    interrupted_banner,
    next_notice,
    wake_banner,
)
from firstmate.rearm.reply import HookReply
from firstmate.store.home import Home

MAX_ATTEMPTS = 3
STORE_WAIT = 10.0


@attrs.frozen
class ClaimLedgerPark:
    """A background stop hook admitted once per turn end by a generation claim (see the
    module). Every knob has a default and an environment variable the harness names for it
    ("" = none)."""

    #: How the hook answers (its exit wakes the session): exit 2, the text on stderr.
    reply: HookReply = attrs.field(factory=HookReply)
    #: Hook events after a failed turn (``stop-failure``): paced by :attr:`cooldown_ms`.
    paced_events: tuple[str, ...] = ()
    #: Foreground arm attempts per turn end (1 to 3).
    attempts: int = 2
    attempts_env: str = ""
    #: Milliseconds between two paced claims.
    cooldown_ms: int = 15000
    cooldown_env: str = ""
    #: Failure notices one episode gives before its alarm.
    notices: int = 3
    notices_env: str = ""
    #: Seconds a wake (or a failure) counts as fresh for the turn-end guard.
    fresh: float = 15.0
    fresh_env: str = ""
    #: The guard's re-blocks before its one attended fail-open, and its wait for proof.
    block_budget: int = 3
    block_budget_env: str = ""
    sync_wait_ms: int = 800
    sync_wait_env: str = ""

    @property
    def guard(self) -> GuardProfile:
        """The turn-end guard's profile for this harness: it blocks, ignores the loop flags
        (the ledger decides) and cooperates with the ledger under these knobs."""
        return GuardProfile(style="block", loop_flags=(), claim_ledger=True,
                            block_budget=self.block_budget,
                            block_budget_env=self.block_budget_env,
                            sync_wait_ms=self.sync_wait_ms, sync_wait_env=self.sync_wait_env,
                            claim_fresh=self.fresh, claim_fresh_env=self.fresh_env)

    def events(self, info: HarnessInfo) -> tuple[str, ...]:
        """The harness's ``rearm_event`` and the paced events."""
        return tuple(dict.fromkeys((*((info.rearm_event,) if info.rearm_event else ()),
                                    *self.paced_events)))

    @property
    def receipt(self) -> str:
        """How the engine's wake reaches the model: the hook's exit wakes the session."""
        return f"the stop hook wakes the session: {self.reply.describe()}"

    def run(self, info: HarnessInfo, event: str, payload: Mapping[str, Any] | None, home: Home,
            env: Mapping[str, str], host: Any = None) -> HookOutcome:
        """One turn end of harness *info* (see the module)."""
        if not home.state.is_dir():
            return HookOutcome.silent()  # no home was ever set up: nothing is supervised
        return TurnEnd(self, info, event, payload, home, env, host).run()


# --- the ledger, for one harness ----------------------------------------------------------------


@contextlib.contextmanager
def _transaction(home: Home) -> Iterator[Any]:
    from firstmate.store.database import open_store

    db = open_store(home)
    try:
        with db.transaction(timeout=STORE_WAIT) as conn:
            yield conn
    finally:
        db.close()


def claim_open(entry: Claim | None, session_pid: int | None, *, now: float,
               beacon_age: float | None, grace: float) -> bool:
    """Whether *entry* is a claim that still admits no other hook: arming, owned by a live
    identity-matched hook of this same session, and not stuck."""
    if entry is None or entry.outcome != "arming":
        return False
    if session_pid is None or entry.session_pid != session_pid:
        return False  # an earlier (dead or replaced) session's orphan: superseded
    if not claimledger.owner_live(entry):
        return False
    return not claimledger.stuck(entry, now=now, beacon_age=beacon_age, grace=grace)


def try_claim(home: Home, harness: str, env: Mapping[str, str], session_pid: int | None, *,
              paced: bool = False) -> Claim | None:
    """Take the next generation claim, or None when an open claim already owns this turn end."""
    from firstmate.store.database import kv_set
    from firstmate.store.health import watcher_health
    from firstmate.store.identity import identity_of

    me = identity_of(os.getpid())
    if me is None:
        return None
    health = watcher_health(home, env)
    now = time.time()
    with _transaction(home) as conn:
        if claim_open(claimledger.read(conn, harness), session_pid, now=now,
                      beacon_age=health.beacon_age, grace=health.grace):
            return None
        entry = claimledger.claim_next(conn, harness, me.pid, me.token(),
                                       session_pid=session_pid, now=now)
        if paced:
            kv_set(conn, claimledger.key(harness, "stopfailure_at"), f"{now:.3f}")
        return entry


def still_ours(home: Home, harness: str, entry: Claim) -> bool:
    from firstmate.store.database import open_store

    db = open_store(home)
    try:
        with db.reading() as conn:
            current = claimledger.read(conn, harness)
    finally:
        db.close()
    return current is not None and current.epoch == entry.epoch and \
        current.owner_pid == entry.owner_pid


def reset_episode(conn: Any, harness: str) -> None:
    """Positive recovery: the next failure is a new episode again."""
    claimledger.clear_failure(conn, harness)
    conn.execute("DELETE FROM kv WHERE key = ?", (claimledger.key(harness, "notices"),))


def commit(home: Home, harness: str, entry: Claim, outcome: str, *,
           recovered: bool = False) -> bool:
    """Record *outcome* for our claim; with *recovered*, also end the failure episode."""
    with _transaction(home) as conn:
        ok = claimledger.commit(conn, harness, entry.epoch, entry.owner_pid, outcome)
        if ok and recovered:
            reset_episode(conn, harness)
        return ok


def record_failure(home: Home, harness: str, entry: Claim, budget: int) -> Notice | None:
    """Advance the failure episode for our claim; None when a newer claim superseded it."""
    from firstmate.store.database import kv_get, kv_set

    notices = claimledger.key(harness, "notices")
    with _transaction(home) as conn:
        current = claimledger.read(conn, harness)
        if current is None or current.epoch != entry.epoch or current.owner_pid != entry.owner_pid:
            return None
        raw = (kv_get(conn, notices) or "").strip()
        sent = int(raw) if raw.isascii() and raw.isdigit() else 0
        notice = next_notice(notified=claimledger.notified_epoch(conn, harness) is not None,
                             alarmed=claimledger.alarmed_epoch(conn, harness) is not None,
                             sent=sent, budget=budget)
        if notice.kind == "suppressed":
            claimledger.commit(conn, harness, entry.epoch, entry.owner_pid, "failed-suppressed")
            return notice
        if notice.kind == "failed":
            sent = 0
            claimledger.mark_notified(conn, harness, entry.epoch)
        kv_set(conn, notices, str(sent + 1))
        if notice.alarm:
            claimledger.mark_alarmed(conn, harness, entry.epoch)
        claimledger.commit(conn, harness, entry.epoch, entry.owner_pid, "failed")
        return notice


def cooldown_left(home: Home, harness: str, cooldown: float, now: float | None = None) -> float:
    """Seconds until the next paced claim may run (0 when it may run now)."""
    from firstmate.store.database import kv_get, open_store

    if not home.db.exists():
        return 0.0
    db = open_store(home)
    try:
        with db.reading() as conn:
            raw = kv_get(conn, claimledger.key(harness, "stopfailure_at"))
    finally:
        db.close()
    try:
        last = float(raw or "")
    except ValueError:
        return 0.0
    now = time.time() if now is None else now
    if last > now:  # a clock step backwards: do not wait forever
        return min(cooldown, last - now)
    return max(0.0, last + cooldown - now)


def pace(left: float, sleep: Callable[[float], None], still_wanted: Callable[[], str | None]) -> \
        str | None:
    """Wait *left* seconds, then ask whether the turn end is still wanted. Returns the
    stand-down code (``away``, ``no-need``) or None to carry on."""
    if left <= 0:
        return None
    sleep(left)
    return still_wanted()


# --- the hook ------------------------------------------------------------------------------------


class Interrupted(BaseException):
    """A stop signal reached the hook (BaseException: no broad ``except`` may swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@attrs.define
class TurnEnd:
    """One run of the hook."""

    strategy: ClaimLedgerPark
    info: HarnessInfo
    event: str
    payload: Mapping[str, Any] | None
    home: Home
    env: Mapping[str, str]
    host: Any = None
    sleep: Callable[[float], None] = time.sleep
    entry: Claim | None = None
    arm: Any = None
    reasons: tuple[str, ...] = ()
    #: The wake's text once the wake is committed (a late signal must not lose it).
    delivered: str = ""

    @property
    def harness(self) -> str:
        return self.info.name

    def knob(self, name: str, default: int, minimum: int = 1) -> int:
        return env_int(self.env, name, default, minimum=minimum) if name else default

    def run(self) -> HookOutcome:
        outcome: HookOutcome | None = None
        try:
            # A stop becomes Interrupted; once one lands, a second cannot cut the notice short.
            with stopsignals.trapped(Interrupted):
                try:
                    outcome = self._run()
                except Interrupted as exc:
                    outcome = self._interrupted(exc.signum)
        except Interrupted as exc:  # arrived while the handlers were being restored
            if outcome is None:
                outcome = self._interrupted(exc.signum)
        return outcome if outcome is not None else HookOutcome.silent()

    # --- steps ---------------------------------------------------------------------------------

    def _run(self) -> HookOutcome:
        facts, _ = claimgates.gather_gates(self.home, self.payload, self.env,
                                           self.info.project_env)
        verdict = claimgates.decide_gates(facts)
        if verdict not in ("proceed", "reclaim"):
            return HookOutcome.silent()
        if verdict == "reclaim" and not self._reclaim():
            return HookOutcome.silent()
        paced = self.event in self.strategy.paced_events
        if paced:
            cooldown = self.knob(self.strategy.cooldown_env, self.strategy.cooldown_ms, 0)
            left = cooldown_left(self.home, self.harness, cooldown / 1000.0)
            if pace(left, self.sleep, self._still_wanted) is not None:
                return HookOutcome.silent()
        from firstmate.continuity import session_lock

        record = session_lock.read_record(self.home).record
        self.entry = try_claim(self.home, self.harness, self.env,
                               record.pid if record else None, paced=paced)
        if self.entry is None:
            return HookOutcome.silent()  # another hook of this session owns this cycle
        return self._arm(self.entry)

    def _reclaim(self) -> bool:
        from firstmate.base.errors import FirstmateError
        from firstmate.continuity import session_lock

        try:
            session_lock.acquire(self.home, self.env)
        except FirstmateError:
            return False
        return True

    def _still_wanted(self) -> str | None:
        if claimgates.away(self.home):
            return "away"
        return None if claimgates.needed(self.home) else "no-need"

    def _engine(self) -> Any:
        from firstmate.continuity.engine import Continuity
        from firstmate.plugin.handoff import Session

        return Continuity.for_session(Session(self.home, self.harness, self.env), self.host,
                                      display_name=self.info.display_name, detached=True)

    def _arm(self, entry: Claim) -> HookOutcome:
        from firstmate.continuity.enginevalues import ContinuityRefused
        from firstmate.store.health import watcher_health

        engine = self._engine()
        attempts = max(1, min(MAX_ATTEMPTS, self.knob(self.strategy.attempts_env,
                                                       self.strategy.attempts)))
        evidence: list[str] = []
        for _ in range(attempts):
            try:
                self.arm = engine.foreground()
            except ContinuityRefused:
                commit(self.home, self.harness, entry, "refused")
                return HookOutcome.silent()
            close = engine.await_close(self.arm)
            if close is not None:
                return self._actionable(engine, close, entry)
            evidence += self._evidence(self.arm)
            if not still_ours(self.home, self.harness, entry):
                return HookOutcome.silent()  # superseded while parked: the newer owner speaks
            if watcher_health(self.home, self.env).healthy:
                commit(self.home, self.harness, entry, "clean", recovered=True)
                return HookOutcome.silent()
        return self._failed(entry, attempts, evidence)

    def _actionable(self, engine: Any, close: Any, entry: Claim) -> HookOutcome:
        self.reasons = tuple(close.reasons)
        if not still_ours(self.home, self.harness, entry):
            return HookOutcome.silent()
        if claimgates.away(self.home):
            # The away-mode owner handles it; the row stays durable in the queue.
            commit(self.home, self.harness, entry, "away")
            return HookOutcome.silent()
        wake, _receipt = engine.handle_close(close)
        restored = wake.restoration_failure is None
        if not commit(self.home, self.harness, entry, "wake", recovered=restored):
            return HookOutcome.silent()
        self.delivered = wake_banner(wake.text)
        return self.strategy.reply.proceed(self.delivered)

    def _failed(self, entry: Claim, attempts: int, evidence: list[str]) -> HookOutcome:
        from firstmate.store.health import watcher_health

        notice = record_failure(self.home, self.harness, entry,
                                self.knob(self.strategy.notices_env, self.strategy.notices))
        if notice is None or notice.kind == "suppressed":
            return HookOutcome.silent()
        health = watcher_health(self.home, self.env)
        hint = (f"watcher {health.state}"
                + (f" pid={health.pid}" if health.pid else "")
                + f", beacon {health.age_text()}s; the failure episode is recorded in the store "
                  "(fm status)")
        return self.strategy.reply.proceed(failure_banner(notice, attempts, evidence, hint))

    @staticmethod
    def _evidence(arm: Any) -> list[str]:
        said = [line for line in arm.lines() if line.startswith("watcher:")]
        code = arm.returncode
        tail = said[-2:] if said else [f"fm arm pid={arm.pid} printed no status line"]
        return [*tail, f"fm arm pid={arm.pid} exited with status {code}"]

    def _interrupted(self, signum: int) -> HookOutcome:
        with contextlib.suppress(Exception):
            if self.arm is not None and self.arm.alive:
                self.arm.terminate()
                self.arm.wait_exit(2.0)
        reply = self.strategy.reply
        if self.delivered:
            return reply.proceed(self.delivered)
        if self.entry is not None:
            with contextlib.suppress(Exception):
                if not commit(self.home, self.harness, self.entry, "failed"):
                    return HookOutcome.silent()  # superseded: the newer owner speaks
        return reply.proceed(interrupted_banner(self.info.display_name, signum, self.reasons))


__all__ = ["MAX_ATTEMPTS", "ClaimLedgerPark", "Interrupted", "TurnEnd", "claim_open",
           "commit", "cooldown_left", "pace", "record_failure", "reset_episode", "still_ours",
           "try_claim"]
