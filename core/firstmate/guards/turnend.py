"""The turn-end guard (``fm turnend-guard`` and every harness's stop hook): the backstop that
keeps a turn from ending unsupervised. The pull guard is :mod:`firstmate.guards.pull`.

Each guard is split in two: *gathering* reads the home into a frozen facts value, and a pure
*decision* function maps facts to a frozen decision. The decision tables (docs/guards.md) are
the decision functions; tests exercise them directly with hand-built facts, and for real with
live watcher processes.

Harness plugins call :func:`turnend_decision` rather than the CLI:

    decision = turnend_decision(NAME, payload, home=home, env=env)  # NAME: the plugin's harness
    if decision.action == "block": …exit 2 with decision.text on stderr…
    elif decision.action == "follow-up": …deliver decision.text once…

Turn-end guard, in order (first match decides):

1. no payload (missing, not an object, empty) → allow
2. not a genuine primary (:mod:`firstmate.store.scope`) → allow
3. no supervision need (no registered crew, check or process source) → allow
4. read-only session (another live session owns the session lock) → allow
5. an identity-matched watcher with a fresh beacon → allow (with a claim ledger: clears its
   failure state)
6. away mode and its owner (the parked supervision host) live with a fresh beacon → allow
7. an open generation claim of the harness's hook, still deciding → allow
8. a harness whose hook keeps a claim ledger (its plugin's ``GuardProfile.claim_ledger``: the
   ``ClaimLedgerPark`` strategy; the ledger is :mod:`firstmate.continuity.claimledger`): the
   cooperation table (:func:`_decide_ledger`); others: a continuation already forced for this
   stop (the profile's ``loop_flags``) → allow
9. otherwise block (exit 2 with a banner) or one follow-up, as the harness's
   ``GuardProfile.style`` says.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

from firstmate.base.envnum import env_float, env_int
from firstmate.continuity.claimledger import ClaimFacts
from firstmate.guards.down import (
    NO_REARM,
    PREFIX,
    Rearm,
    away_note,
    fix,
    last_beat,
    problem,
    publish_if_gone,
    rearm_owner,
)
from firstmate.host.away import AwayFacts
from firstmate.plugin.harness import GuardProfile, HarnessInfo
from firstmate.store.health import WatcherHealth
from firstmate.store.home import Home
from firstmate.store.need import NOTHING_NEEDED, Need, gather_need
from firstmate.store.scope import Scope

Action = Literal["allow", "block", "follow-up"]


DEFAULT_BLOCK_BUDGET = GuardProfile().block_budget
DEFAULT_SYNC_WAIT_MS = GuardProfile().sync_wait_ms
SYNC_POLL = 0.05
#: The re-block budget of a ledger harness lives under ``guard.<harness>.budget``.
BUDGET_KEY_FORMAT = "guard.{harness}.budget"

ASSUMED_PRIMARY = Scope(True, "assumed")
NO_WATCHER = WatcherHealth(False, "none")
NOT_AWAY = AwayFacts()
NO_CLAIM = ClaimFacts()

#: Decisions that mean "nothing here for this session to watch": no payload, not a primary,
#: nothing registered, another session owns the home, or away mode's owner watches. A re-arm
#: strategy lets such a turn end quietly, without parking or blocking.
STAND_ASIDE = ("no-payload", "out-of-scope", "no-need", "read-only", "away-owner")
#: Decisions that end a ledger harness's sync wait early: positive proof that someone is
#: supervising.
_PROOFS = ("healthy", "away-owner", "claim-open", "wake-fresh")


def budget_key(harness: str) -> str:
    """The ``kv`` key of *harness*'s re-block budget."""
    return BUDGET_KEY_FORMAT.format(harness=harness)


@attrs.frozen
class HarnessView:
    """What the guards know about one harness: its plugin's declaration (absent for a harness
    with no plugin here)."""

    info: HarnessInfo | None = None

    @property
    def profile(self) -> GuardProfile:
        return self.info.guard if self.info is not None else GuardProfile()

    @property
    def project_env(self) -> tuple[str, ...]:
        return self.info.project_env if self.info is not None else ()

    @property
    def ledger(self) -> bool:
        """The harness's hook keeps a claim ledger the guard cooperates with."""
        return self.profile.claim_ledger


def harness_view(harness: str, env: Mapping[str, str] | None = None) -> HarnessView:
    """*harness*'s plugin, loaded alone (:func:`firstmate.plugin.manager.load_harness`)."""
    from firstmate.base.errors import FirstmateError
    from firstmate.plugin.manager import load_harness

    try:
        host = load_harness(harness, env)
    except FirstmateError:
        return HarnessView()
    return HarnessView(host.harness(harness))


def guard_profile(harness: str, env: Mapping[str, str] | None = None) -> GuardProfile:
    """How the turn-end guard treats *harness*: what its plugin declares (HarnessInfo.guard);
    the defaults (block, the common loop flags) for a harness with no plugin here."""
    return harness_view(harness, env).profile


# --- facts --------------------------------------------------------------------------------------


@attrs.frozen
class Budget:
    """Re-blocks charged in the current failure episode of a ledger harness."""

    blocks: int = 0
    #: The fresh failed epoch whose handoff was preserved without a charge.
    exempt_epoch: int | None = None

    @property
    def empty(self) -> bool:
        return self.blocks == 0 and self.exempt_epoch is None

    def to_json(self) -> str:
        import json

        return json.dumps({"blocks": self.blocks, "exempt_epoch": self.exempt_epoch})

    @classmethod
    def from_json(cls, text: str | None) -> Budget:
        import json

        try:
            obj = json.loads(text or "")
        except ValueError:
            return cls()
        if not isinstance(obj, dict):
            return cls()
        blocks, exempt = obj.get("blocks"), obj.get("exempt_epoch")
        return cls(blocks if type(blocks) is int and blocks >= 0 else 0,
                   exempt if type(exempt) is int else None)


@attrs.frozen
class TurnEndFacts:
    harness: str
    payload_present: bool = True
    scope: Scope = ASSUMED_PRIMARY
    need: Need = NOTHING_NEEDED
    read_only: bool = False
    lock_pid: int | None = None
    health: WatcherHealth = NO_WATCHER
    #: Seconds since the beacon was touched even when no watcher holds the lock (None: never).
    last_beat: float | None = None
    away: AwayFacts = NOT_AWAY
    claim: ClaimFacts = NO_CLAIM
    #: The payload says a continuation was already forced for this stop.
    loop_active: bool = False
    budget: Budget = Budget()
    #: The re-block budget (``GuardProfile.block_budget``, its knob overriding it).
    limit: int = DEFAULT_BLOCK_BUDGET
    #: The long-lived re-arm owner named by ``FM_REARM_OWNER`` ("" when the hooks own it).
    owner: str = ""
    #: How this harness is treated (its plugin's HarnessInfo.guard).
    profile: GuardProfile = attrs.field(factory=GuardProfile)
    #: How this harness re-arms (its plugin's HarnessInfo): what the advice may tell its model.
    rearm: Rearm = NO_REARM


@attrs.frozen
class TurnEndDecision:
    """What the turn-end guard decided. ``why`` is a stable code (docs/guards.md).

    ``text`` is the banner of a block, the message of a follow-up, or the loud notice of the
    attended fail-open (an allow); empty otherwise. The remaining fields are the state the
    decision wants persisted (:func:`turnend_decision` does that).
    """

    action: Action
    why: str
    text: str = ""
    budget: Budget | None = None
    clear_failure: bool = False
    raise_alarm: bool = False

    @property
    def allowed(self) -> bool:
        return self.action == "allow"

    @property
    def stands_aside(self) -> bool:
        """Nothing here for this session to watch (:data:`STAND_ASIDE`)."""
        return self.why in STAND_ASIDE

    @property
    def exit_code(self) -> int:
        return 2 if self.action == "block" else 0

    def hook_outcome(self) -> Any:
        """The generic command-line rendering (a :class:`firstmate.plugin.harness.HookOutcome`):
        block → exit 2 with the banner on stderr; follow-up → exit 0 with the message on
        stdout; allow → exit 0, silent except the fail-open notice on stderr."""
        from firstmate.plugin.harness import HookOutcome

        text = self.text + "\n" if self.text else ""
        if self.action == "block":
            return HookOutcome(2, "", text)
        if self.action == "follow-up":
            return HookOutcome(0, text, "")
        return HookOutcome(0, "", text)


def loop_active(flags: Sequence[str], payload: Mapping[str, Any] | None) -> bool:
    """Whether the payload says this stop already follows a forced continuation: the first of
    *flags* (the harness's :attr:`GuardProfile.loop_flags`) that is a boolean decides; an
    integer counts continuations."""
    if payload is None:
        return False
    for flag in flags:
        value = payload.get(flag)
        if isinstance(value, bool):
            return value
        if type(value) is int:
            return value > 0
    return False


# --- texts -------------------------------------------------------------------------------------


def turnend_banner(f: TurnEndFacts) -> str:
    lines = [
        f"{PREFIX} WATCHER DOWN - do not end this turn unsupervised.",
        f"{f.need.describe()} need a watcher, but {problem(f.health, f.last_beat)}."
        + away_note(f.away),
    ]
    if f.profile.claim_ledger:
        lines.append("The stop hook's automatic re-arm has not brought a watcher up.")
    lines.append(f"Fix now: {fix(f.health, f.owner, f.rearm)}. Queued wakes stay durable: drain them with "
                 "`fm wake drain` as usual.")
    return "\n".join(lines)


def fail_open_notice(f: TurnEndFacts) -> str:
    what = ("the automatic re-arm failed" if f.claim.failed
            else "the automatic re-arm never restored a watcher")
    return (
        f"{PREFIX} WATCHER DOWN - this turn ends UNSUPERVISED (the one attended fail-open of this "
        f"failure episode): {what} and {f.budget.blocks} re-block(s) did not help; "
        f"{problem(f.health, f.last_beat)}. Tell the captain, then {fix(f.health, f.owner, f.rearm)}."
    )


# --- the turn-end decision -----------------------------------------------------------------------


def _allow(why: str, **changes: Any) -> TurnEndDecision:
    return TurnEndDecision("allow", why, **changes)


def _stop(f: TurnEndFacts, why: str, **changes: Any) -> TurnEndDecision:
    style = f.profile.style
    return TurnEndDecision("block" if style == "block" else "follow-up", why, turnend_banner(f),
                           **changes)


def decide_turnend(f: TurnEndFacts) -> TurnEndDecision:
    """The turn-end decision table (module docstring, docs/guards.md). Pure."""
    if not f.payload_present:
        return _allow("no-payload")
    if not f.scope.primary:
        return _allow("out-of-scope")
    if not f.need.needed:
        return _allow("no-need")
    if f.read_only:
        return _allow("read-only")
    if f.health.healthy:
        clear = f.profile.claim_ledger and not (
            f.budget.empty and not f.claim.notified and not f.claim.alarmed)
        return _allow("healthy", clear_failure=clear)
    if f.away.supervising:
        return _allow("away-owner")
    if f.claim.deciding:
        return _allow("claim-open")
    if f.profile.claim_ledger:
        return _decide_ledger(f)
    if f.loop_active:
        return _allow("continuation-spent")
    return _stop(f, "unhealthy")


def _decide_ledger(f: TurnEndFacts) -> TurnEndDecision:
    """Cooperation with a harness's claim ledger (the loop flags are ignored):

    ======================================================  ==========================
    fresh wake                                               allow ``wake-fresh``
    fresh failed epoch, notice not yet consumed, not yet     block ``failure-handoff``
    exempted                                                 (no charge; epoch exempted)
    blocks < budget                                          block ``unhealthy`` (+1)
    budget spent, alarm already raised this episode          allow ``stood-down``
    budget spent, failure recorded, notice not consumed,     block ``awaiting-notice`` (+1)
    blocks < 2 × budget
    budget spent otherwise                                   allow ``fail-open`` (loud;
                                                             raises the alarm)
    ======================================================  ==========================
    """
    claim, budget = f.claim, f.budget
    if claim.fresh_wake:
        return _allow("wake-fresh")
    if claim.failed and claim.fresh and not claim.notified and claim.epoch is not None \
            and claim.epoch != budget.exempt_epoch:
        return _stop(f, "failure-handoff", budget=attrs.evolve(budget, exempt_epoch=claim.epoch))
    charged = attrs.evolve(budget, blocks=budget.blocks + 1)
    if budget.blocks < f.limit:
        return _stop(f, "unhealthy", budget=charged)
    if claim.alarmed:
        return _allow("stood-down")
    if claim.failed and not claim.notified and budget.blocks < 2 * f.limit:
        return _stop(f, "awaiting-notice", budget=charged)
    return TurnEndDecision("allow", "fail-open", fail_open_notice(f), raise_alarm=True)


# --- gathering -------------------------------------------------------------------------------------


def _read_only(home: Home, env: Mapping[str, str]) -> tuple[bool, int | None]:
    from firstmate.continuity import session_lock

    ins = session_lock.inspect(home)
    if ins.state not in ("held", "unknown") or ins.record is None:
        return False, None
    try:
        owned = session_lock.owned_by_self(ins.record, env=env)
    except Exception:  # an unreadable ancestry never makes a session read-only
        owned = True
    return (not owned), ins.pid


def _claim_facts(conn: Any, facts: TurnEndFacts, env: Mapping[str, str], health: WatcherHealth,
                 now: float) -> ClaimFacts:
    from firstmate.continuity import claimledger

    profile = facts.profile
    window = (env_float(env, profile.claim_fresh_env, profile.claim_fresh)
              if profile.claim_fresh_env else profile.claim_fresh)
    return claimledger.claim_facts(conn, facts.harness, health=health, now=now, window=window)


def _store_facts(home: Home, env: Mapping[str, str], health: WatcherHealth, now: float,
                 facts: TurnEndFacts) -> tuple[ClaimFacts, Budget]:
    if not facts.profile.claim_ledger or not home.db.exists():
        return ClaimFacts(), Budget()
    from firstmate.store.database import Store

    db = Store(home)
    try:
        with db.reading() as conn:
            return (_claim_facts(conn, facts, env, health, now),
                    read_budget(conn, facts.harness))
    finally:
        db.close()


def read_budget(conn: Any, harness: str) -> Budget:
    from firstmate.store.database import kv_get

    return Budget.from_json(kv_get(conn, budget_key(harness)))


def _knob(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    """The integer knob *name* when set and valid, else *default* (no knob when *name* is "")."""
    return env_int(env, name, default, minimum=minimum) if name else default


def gather_turnend(harness: str, payload: Mapping[str, Any] | None, *, home: Home,
                   env: Mapping[str, str] | None = None, cwd: str | None = None,
                   now: float | None = None, view: HarnessView | None = None) -> TurnEndFacts:
    """Read everything :func:`decide_turnend` looks at. Cheap gates first: once one decides,
    the rest keeps its defaults (the decision does not look at them). *view* is *harness*'s
    plugin as :func:`harness_view` finds it (found here when not given)."""
    env = os.environ if env is None else env
    now = time.time() if now is None else now
    view = harness_view(harness, env) if view is None else view
    profile = view.profile
    limit = _knob(env, profile.block_budget_env, profile.block_budget)
    base = TurnEndFacts(harness, limit=limit, loop_active=loop_active(profile.loop_flags, payload),
                        owner=rearm_owner(env), profile=profile, rearm=Rearm.of(view.info))
    if not isinstance(payload, Mapping) or not payload:
        return attrs.evolve(base, payload_present=False)
    from firstmate.store.scope import primary_scope

    scope = primary_scope(home, payload, env, cwd, project_env=view.project_env)
    if not scope.primary:
        return attrs.evolve(base, scope=scope)
    need = gather_need(home)
    if not need.needed:
        return attrs.evolve(base, scope=scope, need=need)
    read_only, lock_pid = _read_only(home, env)
    facts = attrs.evolve(base, scope=scope, need=need, read_only=read_only, lock_pid=lock_pid)
    if read_only:
        return facts
    return refresh(facts, home=home, env=env, now=now)


def refresh(facts: TurnEndFacts, *, home: Home, env: Mapping[str, str],
            now: float | None = None) -> TurnEndFacts:
    """*facts* with the fast-changing parts (watcher, away owner, ledger, budget) read again."""
    from firstmate.host.away import away_facts
    from firstmate.store.health import watcher_health

    now = time.time() if now is None else now
    health = watcher_health(home, env, now=now)
    publish_if_gone(home, health)
    claim, budget = _store_facts(home, env, health, now, facts)
    return attrs.evolve(facts, health=health, last_beat=last_beat(home, now),
                        away=away_facts(home, env, now=now), claim=claim, budget=budget)


def _persist(home: Home, env: Mapping[str, str], facts: TurnEndFacts) -> TurnEndDecision:
    """Decide once more inside one write transaction (the budget read there is the truth)
    and store what the decision changes."""
    from firstmate.continuity import claimledger
    from firstmate.store.database import kv_set, open_store

    key = budget_key(facts.harness)
    db = open_store(home)
    try:
        with db.transaction(timeout=10.0) as conn:
            facts = attrs.evolve(facts, budget=read_budget(conn, facts.harness),
                                 claim=_claim_facts(conn, facts, env, facts.health, time.time()))
            decision = decide_turnend(facts)
            if decision.clear_failure:
                conn.execute("DELETE FROM kv WHERE key = ?", (key,))
                claimledger.clear_failure(conn, facts.harness)
            if decision.budget is not None:
                kv_set(conn, key, decision.budget.to_json())
            if decision.raise_alarm:
                claimledger.mark_alarmed(conn, facts.harness, facts.claim.epoch)
    finally:
        db.close()
    return decision


def turnend_decision(harness: str, payload: Mapping[str, Any] | None, *,
                     home: Home | None = None, env: Mapping[str, str] | None = None,
                     cwd: str | None = None, wait: bool = True) -> TurnEndDecision:
    """Gather, decide and persist: the one call a harness plugin makes at a turn end.

    For a harness with a claim ledger, an unhealthy verdict first waits up to its profile's
    ``sync_wait_ms`` (its ``sync_wait_env`` knob overrides it; *wait* False skips it) for a
    healthy watcher, an open claim or a fresh wake. Only those decisions write state (the
    re-block budget, the alarm, their reset).
    """
    env = os.environ if env is None else env
    if home is None:
        from firstmate.store.home import resolve_root

        home = Home(resolve_root(env))
    view = harness_view(harness, env)
    facts = gather_turnend(harness, payload, home=home, env=env, cwd=cwd, view=view)
    decision = decide_turnend(facts)
    if not view.ledger or decision.why in ("no-payload", "out-of-scope", "no-need", "read-only"):
        return decision
    if wait and decision.why not in _PROOFS:
        budget_ms = _knob(env, facts.profile.sync_wait_env, facts.profile.sync_wait_ms, 0)
        deadline = time.monotonic() + budget_ms / 1000.0
        while time.monotonic() < deadline:
            time.sleep(min(SYNC_POLL, max(0.0, deadline - time.monotonic())))
            facts = refresh(facts, home=home, env=env)
            decision = decide_turnend(facts)
            if decision.why in _PROOFS:
                break
    if decision.budget is None and not decision.clear_failure and not decision.raise_alarm:
        return decision
    return _persist(home, env, facts)


__all__ = [
    "STAND_ASIDE",
    "Budget",
    "ClaimFacts",
    "HarnessView",
    "TurnEndDecision",
    "TurnEndFacts",
    "budget_key",
    "decide_turnend",
    "gather_turnend",
    "guard_profile",
    "harness_view",
    "loop_active",
    "read_budget",
    "refresh",
    "turnend_decision",
]
