"""The Claude ``Stop``/``StopFailure`` auto-arm: the hook that keeps the watcher armed.

Claude runs ``fm hook claude stop`` (or ``stop-failure``) in the background after every turn
(``asyncRewake: true``) and wakes the idle session when it exits 2 with text on stderr. Exit 0
is silent. The hook, in order:

1. **Gates** (:func:`decide_gates`): a genuine primary of the home; a session lock this session
   owns (a dead owner's record is reclaimed, but only after the next two gates; with no record
   at all there is nothing stale to recover, and the hook stays inert: the SessionStart hook is
   what takes the lock); away mode off; something to supervise. ``stop_hook_active`` is never
   consulted: Claude keeps it true after every rewake.
2. **StopFailure pacing**: an API-error turn end waits out ``FM_CLAUDE_STOPFAILURE_COOLDOWN_MS``
   since the last StopFailure-driven claim, then re-reads away mode and need.
3. **Generation claim** in the store (:mod:`firstmate_plugin_claude.ledger`): async hooks are not
   deduplicated, so one home-scoped owner is admitted; an open claim of this session keeps
   every other hook silent, while a claim of an earlier (dead or replaced) session, or a stuck
   one, is superseded.
4. **Foreground arm** inside this process tree, up to ``FM_CLAUDE_AUTOARM_ATTEMPTS`` (1-3, default
   2). An actionable close: the continuity engine launches the handling successor detached
   (own session), waits for its status line and confirms the handoff, then the hook exits 2
   with the wake. A non-actionable close on a healthy watcher is benign: exit 0, silently.
5. **Failure episodes**: FAILED once, then STILL FAILING, then an alarm after which the hook
   stays silent until a positive recovery resets the episode.
6. **Signals**: HUP/TERM/INT (Claude's hook timeout) exit 2 with an INTERRUPTED notice, so the
   session is never left blind by a silently killed hook.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
from firstmate.base import stopsignals
from firstmate.base.envnum import env_int
from firstmate.base.waketext import NEXT_STEP, PREFIX, facts_only, one_line, sanitise
from firstmate.plugin.harness import HookOutcome
from firstmate.store.home import Home

ATTEMPTS_ENV = "FM_CLAUDE_AUTOARM_ATTEMPTS"
DEFAULT_ATTEMPTS = 2
MAX_ATTEMPTS = 3
COOLDOWN_ENV = "FM_CLAUDE_STOPFAILURE_COOLDOWN_MS"
DEFAULT_COOLDOWN_MS = 15000
NOTICES_ENV = "FM_CLAUDE_AUTOARM_NOTICE_BUDGET"
DEFAULT_NOTICES = 3
#: Store keys (the ``kv`` table) this hook owns besides :mod:`firstmate_plugin_claude.ledger`'s ledger.
STOPFAILURE_KEY = "claude.autoarm.stopfailure_at"
NOTICES_KEY = "claude.autoarm.notices"
DISPLAY = "Claude Code"
STORE_WAIT = 10.0
#: Lines of evidence a failure notice carries at most.
MAX_EVIDENCE = 6

WAKE_LINE = "One supervision event needs a handling turn now."
class Interrupted(BaseException):
    """A stop signal reached the hook (BaseException: no broad ``except`` may swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


# --- gates -------------------------------------------------------------------------------------

#: What the session lock looks like to this hook.
LOCK_STATES = ("owned", "absent", "reclaimable", "other-live", "unreadable")


@attrs.frozen
class GateFacts:
    primary: bool
    lock: str
    away: bool
    needed: bool


def decide_gates(f: GateFacts) -> str:
    """``proceed``, ``reclaim`` (take the lock, then proceed) or the code a stand-down has.

    Order matters: a dead owner's lock is only reclaimed once away mode and need allow it, and a
    session that does not own the lock never learns anything else about the home. An absent
    lock names no owner, so there is nothing stale to recover: taking it is the SessionStart
    hook's job, never a turn end's.
    """
    if not f.primary:
        return "out-of-scope"
    if f.lock == "absent":
        return "no-lock"
    if f.lock in ("other-live", "unreadable"):
        return "not-owner"
    if f.away:
        return "away"
    if not f.needed:
        return "no-need"
    return "proceed" if f.lock == "owned" else "reclaim"


def lock_state(home: Home, env: Mapping[str, str]) -> tuple[str, int | None]:
    """This session's view of the session lock, and the recorded pid."""
    from firstmate.continuity import session_lock

    found = session_lock.read_record(home)
    if found.kind == "absent":
        return "absent", None
    record = found.record
    if record is None:
        return "unreadable", found.pid
    try:
        if session_lock.owned_by_self(record, env=env):
            return "owned", record.pid
        return ("other-live" if session_lock.blocks_reclaim(record) else "reclaimable"), record.pid
    except Exception:  # an unreadable ancestry never arms on someone else's lock
        return "unreadable", record.pid


def gather_gates(home: Home, payload: Mapping[str, Any] | None,
                 env: Mapping[str, str]) -> tuple[GateFacts, int | None]:
    """Read the gates' facts, cheapest first; the later ones keep harmless defaults once an
    earlier gate decides."""
    from firstmate.store.scope import primary_scope

    from firstmate_plugin_claude.hooks import PROJECT_ENV

    if not primary_scope(home, payload, env, project_env=PROJECT_ENV).primary:
        return GateFacts(False, "absent", False, False), None
    lock, pid = lock_state(home, env)
    if lock in ("absent", "other-live", "unreadable"):
        return GateFacts(True, lock, False, False), pid
    return GateFacts(True, lock, _away(home), _needed(home)), pid


def _away(home: Home) -> bool:
    from firstmate.host.away import is_away

    return is_away(home)


def _needed(home: Home) -> bool:
    from firstmate.store.need import gather_need

    return gather_need(home).needed


# --- the ledger --------------------------------------------------------------------------------


@contextlib.contextmanager
def _transaction(home: Home) -> Iterator[Any]:
    from firstmate.store.database import open_store

    db = open_store(home)
    try:
        with db.transaction(timeout=STORE_WAIT) as conn:
            yield conn
    finally:
        db.close()


def claim_open(entry: Any, session_pid: int | None, *, now: float,
               beacon_age: float | None, grace: float) -> bool:
    """Whether *entry* is a claim that still admits no other hook: arming, owned by a live
    identity-matched hook of this same session, and not stuck."""
    from firstmate_plugin_claude import ledger as autoarm

    if entry is None or entry.outcome != "arming":
        return False
    if session_pid is None or entry.session_pid != session_pid:
        return False  # an earlier (dead or replaced) session's orphan: superseded
    if not autoarm.owner_live(entry):
        return False
    return not autoarm.stuck(entry, now=now, beacon_age=beacon_age, grace=grace)


def try_claim(home: Home, env: Mapping[str, str], session_pid: int | None, *,
              stop_failure: bool = False) -> Any:
    """Take the next generation claim, or None when an open claim already owns this turn end."""
    from firstmate.store.database import kv_set
    from firstmate.store.health import watcher_health
    from firstmate.store.identity import identity_of

    from firstmate_plugin_claude import ledger as autoarm

    me = identity_of(os.getpid())
    if me is None:
        return None
    health = watcher_health(home, env)
    now = time.time()
    with _transaction(home) as conn:
        if claim_open(autoarm.read(conn), session_pid, now=now, beacon_age=health.beacon_age,
                      grace=health.grace):
            return None
        entry = autoarm.claim_next(conn, me.pid, me.token(), session_pid=session_pid, now=now)
        if stop_failure:
            kv_set(conn, STOPFAILURE_KEY, f"{now:.3f}")
        return entry


def still_ours(home: Home, entry: Any) -> bool:
    from firstmate.store.database import open_store

    from firstmate_plugin_claude import ledger as autoarm

    db = open_store(home)
    try:
        with db.reading() as conn:
            current = autoarm.read(conn)
    finally:
        db.close()
    return current is not None and current.epoch == entry.epoch and \
        current.owner_pid == entry.owner_pid


def commit(home: Home, entry: Any, outcome: str, *, recovered: bool = False) -> bool:
    """Record *outcome* for our claim; with *recovered*, also end the failure episode."""
    from firstmate_plugin_claude import ledger as autoarm

    with _transaction(home) as conn:
        ok = autoarm.commit(conn, entry.epoch, entry.owner_pid, outcome)
        if ok and recovered:
            reset_episode(conn)
        return ok


def reset_episode(conn: Any) -> None:
    """Positive recovery: the next failure is a new episode again."""
    from firstmate_plugin_claude import ledger as autoarm

    autoarm.clear_failure(conn)
    conn.execute("DELETE FROM kv WHERE key = ?", (NOTICES_KEY,))


@attrs.frozen
class Notice:
    """Which failure notice a failed cycle gets: ``failed``, ``still`` or ``suppressed``."""

    kind: str
    #: This notice spends the episode's budget: it says so, and later ones are suppressed.
    alarm: bool = False


def next_notice(*, notified: bool, alarmed: bool, sent: int, budget: int) -> Notice:
    """The failure-episode progression (pure): first FAILED, then STILL FAILING, and once the
    alarm was raised (by the last budgeted notice, or by the turn-end guard) nothing."""
    if alarmed:
        return Notice("suppressed")
    count = sent if notified else 0
    return Notice("failed" if count == 0 else "still", alarm=count + 1 >= budget)


def record_failure(home: Home, entry: Any, env: Mapping[str, str]) -> Notice | None:
    """Advance the failure episode for our claim; None when a newer claim superseded it."""
    from firstmate.store.database import kv_get, kv_set

    from firstmate_plugin_claude import ledger as autoarm

    budget = env_int(env, NOTICES_ENV, DEFAULT_NOTICES)
    with _transaction(home) as conn:
        current = autoarm.read(conn)
        if current is None or current.epoch != entry.epoch or current.owner_pid != entry.owner_pid:
            return None
        raw = (kv_get(conn, NOTICES_KEY) or "").strip()
        sent = int(raw) if raw.isascii() and raw.isdigit() else 0
        notice = next_notice(notified=autoarm.notified_epoch(conn) is not None,
                             alarmed=autoarm.alarmed_epoch(conn) is not None, sent=sent,
                             budget=budget)
        if notice.kind == "suppressed":
            autoarm.commit(conn, entry.epoch, entry.owner_pid, "failed-suppressed")
            return notice
        if notice.kind == "failed":
            sent = 0
            autoarm.mark_notified(conn, entry.epoch)
        kv_set(conn, NOTICES_KEY, str(sent + 1))
        if notice.alarm:
            autoarm.mark_alarmed(conn, entry.epoch)
        autoarm.commit(conn, entry.epoch, entry.owner_pid, "failed")
        return notice


# --- StopFailure pacing --------------------------------------------------------------------------


def cooldown_left(home: Home, env: Mapping[str, str], now: float | None = None) -> float:
    """Seconds until the next StopFailure-driven claim may run (0 when it may run now)."""
    from firstmate.store.database import kv_get, open_store

    if not home.db.exists():
        return 0.0
    cooldown = env_int(env, COOLDOWN_ENV, DEFAULT_COOLDOWN_MS, minimum=0) / 1000.0
    db = open_store(home)
    try:
        with db.reading() as conn:
            raw = kv_get(conn, STOPFAILURE_KEY)
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


# --- texts ---------------------------------------------------------------------------------------


def wake_banner(text: str) -> str:
    """The rewake text: the engine's wake (prefix, reasons, failure line, next step) with our
    one-line headline under its first line."""
    lines = text.split("\n")
    return sanitise("\n".join([lines[0], WAKE_LINE, *lines[1:]])) + "\n"


def failure_banner(notice: Notice, attempts: int, evidence: list[str], state_hint: str) -> str:
    noun = "attempt" if attempts == 1 else "attempts"
    what = "FAILED" if notice.kind == "failed" else "STILL FAILING"
    lines = [f"{PREFIX} Firstmate auto-arm {what} - the Stop hook that keeps the watcher armed "
             f"could not start or attach to a live watcher after {attempts} bounded {noun}; "
             "supervision is off until it recovers."]
    # Facts only: an arm's advice to an operator (fm arm --take-over) is not the model's to take.
    lines += [f"evidence: {facts_only(e)[:600]}" for e in evidence[-MAX_EVIDENCE:]]
    lines.append(f"state: {state_hint}")
    lines.append("The next turn end retries automatically. Run `fm status` to see the watcher "
                 "and the session lock, run `fm wake drain` to handle anything queued, and tell "
                 "the captain; do not arm the watcher by hand from a tool call.")
    if notice.alarm:
        lines.append("This was the last notice of this failure episode: further failures stay "
                     "silent until the watcher recovers.")
    return sanitise("\n".join(lines)) + "\n"


def interrupted_banner(signum: int, reasons: tuple[str, ...]) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    lines = [f"{PREFIX} Firstmate auto-arm INTERRUPTED by {name} - Claude Code ended the Stop "
             "hook (its timeout or a shutdown) while it owned the watcher cycle, so this cycle "
             "is no longer watched by the hook."]
    lines += [one_line(r) for r in reasons]
    lines.append("The next turn end re-arms automatically. " + NEXT_STEP)
    return sanitise("\n".join(lines)) + "\n"


# --- the hook ------------------------------------------------------------------------------------


@attrs.define
class TurnEnd:
    """One run of the auto-arm hook."""

    event: str
    payload: Mapping[str, Any] | None
    home: Home
    env: Mapping[str, str]
    host: Any = None
    sleep: Callable[[float], None] = time.sleep
    entry: Any = None
    arm: Any = None
    reasons: tuple[str, ...] = ()
    #: The wake banner once the wake is committed (a late signal must not lose it).
    delivered: str = ""

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
        facts, _ = gather_gates(self.home, self.payload, self.env)
        verdict = decide_gates(facts)
        if verdict not in ("proceed", "reclaim"):
            return HookOutcome.silent()
        if verdict == "reclaim" and not self._reclaim():
            return HookOutcome.silent()
        if self.event == "stop-failure":
            stood_down = pace(cooldown_left(self.home, self.env), self.sleep, self._still_wanted)
            if stood_down is not None:
                return HookOutcome.silent()
        from firstmate.continuity import session_lock

        record = session_lock.read_record(self.home).record
        self.entry = try_claim(self.home, self.env, record.pid if record else None,
                               stop_failure=self.event == "stop-failure")
        if self.entry is None:
            return HookOutcome.silent()  # another hook of this session owns this cycle
        return self._arm()

    def _reclaim(self) -> bool:
        from firstmate.base.errors import FirstmateError
        from firstmate.continuity import session_lock

        try:
            session_lock.acquire(self.home, self.env)
        except FirstmateError:
            return False
        return True

    def _still_wanted(self) -> str | None:
        if _away(self.home):
            return "away"
        return None if _needed(self.home) else "no-need"

    def _engine(self) -> Any:
        from firstmate.continuity.engine import Continuity
        from firstmate.plugin.handoff import Session

        return Continuity.for_session(Session(self.home, "claude", self.env), self.host,
                                      display_name=DISPLAY, detached=True)

    def _arm(self) -> HookOutcome:
        from firstmate.continuity.enginevalues import ContinuityRefused
        from firstmate.store.health import watcher_health

        engine = self._engine()
        attempts = max(1, min(MAX_ATTEMPTS, env_int(self.env, ATTEMPTS_ENV, DEFAULT_ATTEMPTS)))
        evidence: list[str] = []
        for _ in range(attempts):
            try:
                self.arm = engine.foreground()
            except ContinuityRefused:
                commit(self.home, self.entry, "refused")
                return HookOutcome.silent()
            close = engine.await_close(self.arm)
            if close is not None:
                return self._actionable(engine, close)
            evidence += self._evidence(self.arm)
            if not still_ours(self.home, self.entry):
                return HookOutcome.silent()  # superseded while parked: the newer owner speaks
            if watcher_health(self.home, self.env).healthy:
                commit(self.home, self.entry, "clean", recovered=True)
                return HookOutcome.silent()
        return self._failed(attempts, evidence)

    def _actionable(self, engine: Any, close: Any) -> HookOutcome:
        self.reasons = tuple(close.reasons)
        if not still_ours(self.home, self.entry):
            return HookOutcome.silent()
        if _away(self.home):
            # The away-mode owner handles it; the row stays durable in the queue.
            commit(self.home, self.entry, "away")
            return HookOutcome.silent()
        wake, _receipt = engine.handle_close(close)
        restored = wake.restoration_failure is None
        if not commit(self.home, self.entry, "rewake", recovered=restored):
            return HookOutcome.silent()
        self.delivered = wake_banner(wake.text)
        return HookOutcome(2, "", self.delivered)

    def _failed(self, attempts: int, evidence: list[str]) -> HookOutcome:
        from firstmate.store.health import watcher_health

        notice = record_failure(self.home, self.entry, self.env)
        if notice is None or notice.kind == "suppressed":
            return HookOutcome.silent()
        health = watcher_health(self.home, self.env)
        hint = (f"watcher {health.state}"
                + (f" pid={health.pid}" if health.pid else "")
                + f", beacon {health.age_text()}s; the failure episode is recorded in the store "
                  "(fm status)")
        return HookOutcome(2, "", failure_banner(notice, attempts, evidence, hint))

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
        if self.delivered:
            return HookOutcome(2, "", self.delivered)
        if self.entry is not None:
            with contextlib.suppress(Exception):
                if not commit(self.home, self.entry, "failed"):
                    return HookOutcome.silent()  # superseded: the newer owner speaks
        return HookOutcome(2, "", interrupted_banner(signum, self.reasons))


def turn_end(event: str, payload: Mapping[str, Any] | None, home: Home,
             env: Mapping[str, str], host: Any = None) -> HookOutcome:
    """The ``stop`` / ``stop-failure`` hook."""
    return TurnEnd(event, payload, home, env, host).run()


__all__ = ["GateFacts", "Interrupted", "Notice", "TurnEnd", "claim_open", "decide_gates",
           "failure_banner", "gather_gates", "interrupted_banner", "next_notice", "pace",
           "try_claim", "turn_end", "wake_banner"]
