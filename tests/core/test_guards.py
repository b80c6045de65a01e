"""The turn-end guard and the pull guard: decision tables, then the real thing with live watchers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import pytest
from firstmate.continuity import claimledger, session_lock
from firstmate.continuity.claimledger import ClaimFacts
from firstmate.guards import turnend as guards
from firstmate.guards.down import Rearm
from firstmate.guards.pull import PullFacts, decide_pull
from firstmate.guards.turnend import (
    Budget,
    TurnEndFacts,
    decide_turnend,
    guard_profile,
    loop_active,
)
from firstmate.host.away import AwayFacts
from firstmate.plugin.harness import GuardProfile
from firstmate.store import grants
from firstmate.store.database import Store, kv_get, open_store
from firstmate.store.health import WatcherHealth
from firstmate.store.identity import identity_of
from firstmate.store.need import Need
from firstmate.store.scope import Scope, classify_dir, primary_scope
from firstmate.testing.procs import eventually
from firstmate.testing.sites import declare
from watch_support import Rig, make_rig, started_pid

HEALTHY = WatcherHealth(True, "healthy", True, pid=10, beacon_age=1.0)
NONE = WatcherHealth(False, "none")
STALE = WatcherHealth(False, "stale-beacon", True, pid=10, beacon_age=900.0, grace=300.0)
UNVERIFIED = WatcherHealth(False, "unverified", pid=10)
NEED = Need(crews=1)
AWAY_OK = AwayFacts(True, 42, True, 5.0, 360.0)


#: What the harness plugins declare (HarnessInfo.guard): core knows no harness, so these tests
#: say it themselves; the process tests install stand-in plugins declaring the same.
PROFILES = {
    "claude": GuardProfile(style="block", loop_flags=(), claim_ledger=True,
                           block_budget_env="FM_STANDIN_BLOCK_BUDGET",
                           sync_wait_env="FM_STANDIN_SYNC_WAIT_MS"),
    "codex": GuardProfile(style="block", loop_flags=("stop_hook_active",)),
    "grok": GuardProfile(style="block", loop_flags=("stopHookActive", "stop_hook_active")),
    "omp": GuardProfile(style="block"),
    "cursor": GuardProfile(style="follow-up"),
    "pi": GuardProfile(style="follow-up"),
    "opencode": GuardProfile(style="follow-up"),
}

#: How each re-arms (HarnessInfo.rearm_owner, rearm_command), as the plugins declare it.
REARMS = {
    "claude": ("hook", ()), "cursor": ("hook", ()), "codex": ("checkpoint", ("checkpoint",
                                                                        "--seconds", "600")),
    "grok": ("model-task", ("arm",)), "omp": ("extension", ()), "pi": ("extension", ()),
    "opencode": ("extension", ()),
}

STAND_IN = """
from firstmate import hookimpl
from firstmate.plugin.harness import GuardProfile, HarnessInfo


class StandIn:
    @hookimpl
    def firstmate_harness_info(self):
        return HarnessInfo(name={name!r}, display_name={name!r}, family="hook",
                           rearm_owner={owner!r}, rearm_command={command!r}, rearm_event="stop",
                           wake_channel="stand-in", process_names=({name!r},),
                           guard={profile!r})


plugin = StandIn()
"""


def facts(harness: str = "codex", **changes: Any) -> TurnEndFacts:
    return TurnEndFacts(harness, **{"need": NEED, "health": NONE,
                                    "profile": PROFILES.get(harness, GuardProfile()), **changes})


# --- the turn-end decision table ----------------------------------------------------------------

GENERIC = [
    ("no payload", dict(payload_present=False), "allow", "no-payload"),
    ("crew worktree", dict(scope=Scope(False, "crew")), "allow", "out-of-scope"),
    ("nothing to supervise", dict(need=Need()), "allow", "no-need"),
    ("another session owns the lock", dict(read_only=True), "allow", "read-only"),
    ("healthy watcher", dict(health=HEALTHY), "allow", "healthy"),
    ("away owner with fresh beacon", dict(away=AWAY_OK), "allow", "away-owner"),
    ("away owner, beacon stale", dict(away=attrs.evolve(AWAY_OK, beacon_age=999.0)), "block",
     "unhealthy"),
    ("away, no owner", dict(away=attrs.evolve(AWAY_OK, owner_live=False)), "block",
     "unhealthy"),
    ("open claim deciding", dict(claim=ClaimFacts(1, "arming", deciding=True)), "allow",
     "claim-open"),
    ("finished, hung or mismatched claim", dict(claim=ClaimFacts(1, "arming", deciding=False)),
     "block", "unhealthy"),
    ("continuation already forced", dict(loop_active=True), "allow", "continuation-spent"),
    ("no watcher", {}, "block", "unhealthy"),
    ("stale beacon", dict(health=STALE), "block", "unhealthy"),
    ("unverified holder", dict(health=UNVERIFIED), "block", "unhealthy"),
]


@pytest.mark.parametrize(("case", "changes", "action", "why"), GENERIC,
                         ids=[row[0] for row in GENERIC])
def test_generic_table(case: str, changes: dict[str, Any], action: str, why: str) -> None:
    decision = decide_turnend(facts("codex", **changes))
    assert (decision.action, decision.why) == (action, why)
    assert decision.budget is None and not decision.raise_alarm
    if action == "block":
        assert decision.exit_code == 2
        assert "WATCHER DOWN" in decision.text and "`fm arm" in decision.text
    else:
        assert decision.exit_code == 0 and decision.text == ""


@pytest.mark.parametrize(("harness", "action"), [
    ("claude", "block"), ("codex", "block"), ("grok", "block"), ("omp", "block"),
    ("cursor", "follow-up"), ("pi", "follow-up"), ("opencode", "follow-up"),
    ("some-new-harness", "block"),
])
def test_each_harness_blocks_its_own_way(harness: str, action: str) -> None:
    decision = decide_turnend(facts(harness))
    assert decision.action == action
    outcome = decision.hook_outcome()
    if action == "block":
        assert (outcome.exit_code, outcome.stdout) == (2, "")
        assert outcome.stderr.startswith("FIRSTMATE_OP: WATCHER DOWN")
    else:
        assert (outcome.exit_code, outcome.stderr) == (0, "")
        assert outcome.stdout.startswith("FIRSTMATE_OP: WATCHER DOWN")


def test_banner_names_the_fix_for_each_failure() -> None:
    assert "fm arm --take-over" in decide_turnend(facts(health=STALE)).text
    assert "has not polled for 900s (grace 300s)" in decide_turnend(facts(health=STALE)).text
    none = decide_turnend(facts(last_beat=400.0)).text
    assert "no live watcher process holds this home's lock (last beat: 6m ago)" in none
    assert "cannot be verified" in decide_turnend(facts(health=UNVERIFIED)).text
    away = decide_turnend(facts(away=attrs.evolve(AWAY_OK, owner_live=False))).text
    assert "no supervision host is parked" in away


def test_under_a_long_lived_re_arm_owner_the_advice_never_says_arm_by_hand() -> None:
    owner = "fm codex-serve (pid 42)"
    for health in (NONE, STALE):
        text = decide_turnend(facts(health=health, owner=owner)).text
        assert "do not run `fm arm` yourself: fm codex-serve (pid 42) owns re-arming" in text
        assert "as a tracked background task" not in text
    pulled = decide_pull(PullFacts(need=Need(crews=1), owner=owner)).text
    assert "do not run `fm arm` yourself" in pulled and "tracked background task" not in pulled


@pytest.mark.parametrize(("rearm", "said", "never"), [
    (Rearm("hook", "Claude Code", "stop"),
     "do not run `fm arm` yourself: Claude Code's Stop hook starts the watcher when a turn ends",
     "tracked background task"),
    (Rearm("extension", "Pi"),
     "do not run `fm arm` yourself: Pi's Firstmate extension starts the watcher", "`fm arm` as"),
    (Rearm("checkpoint", "Codex", "stop", ("checkpoint", "--seconds", "600")),
     "run `fm checkpoint --seconds 600` in the foreground, as your protocol says", "fm arm"),
    (Rearm("model-task", "Grok", "stop", ("arm",)),
     "run `fm arm` as a tracked background task", "do not run"),
], ids=["hook", "extension", "checkpoint", "model-task"])
def test_the_advice_is_what_the_harness_lets_its_model_do(rearm: Rearm, said: str,
                                                          never: str) -> None:
    for health in (NONE, STALE):
        texts = [decide_turnend(facts("codex", health=health, rearm=rearm)).text,
                 decide_turnend(facts("claude", health=health, rearm=rearm,
                                      budget=Budget(3))).text,  # the fail-open notice
                 decide_pull(PullFacts(need=NEED, health=health, rearm=rearm)).text]
        for text in texts:
            if rearm.kind != "model-task" or health is NONE:
                assert said in text, text
            assert never not in text, text


@pytest.mark.parametrize(("harness", "payload", "expected"), [
    ("codex", {"stop_hook_active": True}, True),
    ("codex", {"stop_hook_active": False}, False),
    ("grok", {"stopHookActive": False, "stop_hook_active": True}, False),
    ("grok", {"stop_hook_active": True}, True),
    ("cursor", {"loop_count": 2}, True),
    ("cursor", {"loop_count": 0}, False),
    ("codex", {"stop_hook_active": "yes"}, False),
    ("codex", None, False),
    ("claude", {"stop_hook_active": True}, False),  # its guard cooperates with its ledger
])
def test_loop_flags(harness: str, payload: dict[str, Any] | None, expected: bool) -> None:
    assert loop_active(PROFILES[harness].loop_flags, payload) is expected


def test_a_harness_with_no_plugin_here_gets_the_default_profile() -> None:
    assert guard_profile("no-such-harness", {}) == GuardProfile()
    assert decide_turnend(facts("no-such-harness")).action == "block"


FAILED = ClaimFacts(7, "failed", fresh=True, failed=True)
CLAUDE = [
    ("stop_hook_active is ignored", dict(loop_active=True), "block", "unhealthy", Budget(1)),
    ("fresh wake", dict(claim=ClaimFacts(3, "wake", fresh=True)), "allow", "wake-fresh",
     None),
    ("old wake is no proof", dict(claim=ClaimFacts(3, "wake", fresh=False)), "block",
     "unhealthy", Budget(1)),
    ("first fresh failure keeps its handoff", dict(claim=FAILED), "block", "failure-handoff",
     Budget(0, 7)),
    ("same failure epoch is charged", dict(claim=FAILED, budget=Budget(0, 7)), "block",
     "unhealthy", Budget(1, 7)),
    ("last block of the budget", dict(budget=Budget(2)), "block", "unhealthy", Budget(3)),
    ("failure notice not consumed yet",
     dict(claim=attrs.evolve(FAILED, fresh=False), budget=Budget(3)), "block", "awaiting-notice",
     Budget(4)),
    ("notice never consumed: bounded", dict(claim=attrs.evolve(FAILED, fresh=False),
                                            budget=Budget(6)), "allow", "fail-open", None),
    ("after the notice: the one fail-open",
     dict(claim=attrs.evolve(FAILED, fresh=False, notified=True), budget=Budget(3)), "allow",
     "fail-open", None),
    ("inert auto-arm: the one fail-open", dict(budget=Budget(3)), "allow", "fail-open", None),
    ("alarm already raised", dict(claim=ClaimFacts(alarmed=True), budget=Budget(3)), "allow",
     "stood-down", None),
]


@pytest.mark.parametrize(("case", "changes", "action", "why", "budget"), CLAUDE,
                         ids=[row[0] for row in CLAUDE])
def test_claude_table(case: str, changes: dict[str, Any], action: str, why: str,
                      budget: Budget | None) -> None:
    decision = decide_turnend(facts("claude", limit=3, **changes))
    assert (decision.action, decision.why, decision.budget) == (action, why, budget)
    assert decision.raise_alarm is (why == "fail-open")
    if why == "fail-open":
        assert decision.exit_code == 0 and "UNSUPERVISED" in decision.text
    if why == "stood-down":
        assert decision.text == ""


@pytest.mark.parametrize(("claim", "budget", "clears"), [
    (ClaimFacts(), Budget(), False),
    (ClaimFacts(), Budget(2), True),
    (ClaimFacts(notified=True), Budget(), True),
    (ClaimFacts(alarmed=True), Budget(), True),
])
def test_claude_positive_recovery_clears_the_episode(claim: ClaimFacts, budget: Budget,
                                                     clears: bool) -> None:
    decision = decide_turnend(facts("claude", health=HEALTHY, claim=claim, budget=budget))
    assert (decision.action, decision.why, decision.clear_failure) == ("allow", "healthy", clears)
    # Other harnesses keep no failure state.
    assert not decide_turnend(facts("codex", health=HEALTHY, budget=budget)).clear_failure


# --- the pull-guard decision table ---------------------------------------------------------------


def pull(**changes: Any) -> PullFacts:
    return PullFacts(**{"need": NEED, "health": NONE, **changes})


def test_pull_banner_once_per_episode_then_a_reminder() -> None:
    first = decide_pull(pull())
    assert first.episode == "no-watcher"
    assert first.lines[0] == "●  WATCHER DOWN - SUPERVISION IS OFF"
    assert len(first.lines) == 4 and "fm arm" in first.lines[3]
    again = decide_pull(pull(announced="no-watcher"))
    assert again.episode == "no-watcher" and len(again.lines) == 1
    assert again.lines[0].startswith("WARNING: watcher still down (same no-watcher episode")
    stale = decide_pull(pull(health=STALE, announced="no-watcher"))
    assert stale.episode == "stale-beacon" and len(stale.lines) == 4
    assert "fm arm --take-over" in stale.lines[3]


@pytest.mark.parametrize("changes", [
    dict(health=HEALTHY, announced="no-watcher"), dict(need=Need()), dict(primary=False),
    dict(away=AWAY_OK),
], ids=["healthy", "no-need", "not-primary", "away-owner"])
def test_pull_silent_when_supervised_or_not_needed(changes: dict[str, Any]) -> None:
    decision = decide_pull(pull(**changes))
    assert decision.lines == () and decision.episode is None


def test_pull_queue_warnings_count_only_the_callers_rows() -> None:
    lines = decide_pull(pull(health=HEALTHY, mine=2)).lines
    assert lines == ("WARNING: 2 queued wake row(s) pending - run fm wake drain and handle them "
                     "before anything else.",)
    down = decide_pull(pull(mine=1, announced="no-watcher")).lines
    assert len(down) == 3 and down[2].startswith("WARNING: the watcher is down with queued wakes")
    held = decide_pull(pull(health=HEALTHY, held=(4, 5), held_pid=77, held_generation="g1")).lines
    assert len(held) == 1
    assert held[0].startswith("NOTE: nothing queued is yours to drain: 2 queued wake row(s) (4,5)"
                              " are held by the live supervision branch (pid 77, grant g1)")
    assert "do not drain them from here" in held[0]
    both = decide_pull(pull(health=HEALTHY, mine=1, held=(9,), held_pid=1, held_generation="g")
                       ).lines
    assert both[0].startswith("WARNING: 1 queued") and both[1].startswith("NOTE: 1 queued")
    branch = decide_pull(pull(health=HEALTHY, actor="branch", mine=3, held=(1, 2, 3)))
    assert branch.lines == ()


# --- scope -----------------------------------------------------------------------------------------


def test_scope_rule(tmp_path: Path) -> None:
    main = tmp_path / "repo"
    (main / ".git").mkdir(parents=True)
    (main / "src").mkdir()
    assert classify_dir(main / "src").primary
    linked = tmp_path / "wt" / "t1"
    linked.mkdir(parents=True)
    (linked / ".git").write_text(f"gitdir: {main}/.git/worktrees/t1\n")
    assert not classify_dir(linked).primary
    (linked / ".fm-primary").write_text("second-captain\n")
    assert classify_dir(linked).primary
    (linked / ".fm-primary").write_text("not an identifier!\n")
    assert not classify_dir(linked).primary
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / ".git").write_text(f"gitdir: {main}/.git/modules/sub\n")
    assert classify_dir(sub).primary
    scout = main / "scratch"
    scout.mkdir()
    (scout / ".fm-crew").write_text("scout\n")
    assert not classify_dir(scout).primary
    assert classify_dir(tmp_path / "nowhere").primary


def test_scope_env_and_home(tmp_path: Path) -> None:
    from firstmate.store.home import Home

    home = Home(tmp_path / "home")
    assert not primary_scope(home, None, {}).primary  # never set up
    home.ensure()
    project = str(tmp_path)
    assert primary_scope(home, {"cwd": project}, {}).primary
    assert not primary_scope(home, {"cwd": project}, {"FM_CREW": "t1"}).primary
    assert not primary_scope(home, {"cwd": project}, {"FM_TASK_ID": "7"}).primary


# --- for real: the CLI with live watchers ----------------------------------------------------------


@pytest.fixture
def grig(tmp_path: Path) -> Any:
    """A rig whose home needs supervision (one process source) and a primary project dir."""
    made = make_rig(tmp_path)
    (made.home.state / "sources").mkdir()
    (made.home.state / "sources" / "prs.source").write_text("pr poller\n")
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    made.env["FM_PROJECT_DIR"] = str(project)
    # Stand-in harness plugins (the real ones live in plugins/): how each is guarded.
    stand_ins = tmp_path / "stand-ins"
    stand_ins.mkdir()
    for name, profile in PROFILES.items():
        (stand_ins / f"standin_{name}.py").write_text(STAND_IN.format(
            name=name, profile=profile, owner=REARMS[name][0], command=REARMS[name][1]))
        declare(stand_ins, name, f"standin_{name}")  # (found before an installed plugin)
    made.env["PYTHONPATH"] = os.pathsep.join(
        [str(stand_ins), *filter(None, made.env.get("PYTHONPATH", "").split(os.pathsep))])
    try:
        yield made
    finally:
        made.reap()


def run_guard(rig: Rig, harness: str, payload: object = None, **env: str
              ) -> subprocess.CompletedProcess[str]:
    body = "" if payload is None else json.dumps(payload)
    return subprocess.run(
        [sys.executable, "-m", "firstmate", "turnend-guard", "--harness", harness], input=body,
        capture_output=True, text=True, env={**rig.env, **env}, timeout=60, check=False,
    )


def run_pull(rig: Rig, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "firstmate", "guard", *args],
                          capture_output=True, text=True, env={**rig.env, **env}, timeout=60,
                          check=False)


STOP = {"session_id": "s1", "hook_event_name": "Stop"}


@pytest.mark.parametrize("harness", ["codex", "grok", "omp"])
def test_no_watcher_blocks_with_a_banner(grig: Rig, harness: str) -> None:
    done = run_guard(grig, harness, STOP)
    assert done.returncode == 2, done
    assert done.stdout == ""
    assert done.stderr.startswith("FIRSTMATE_OP: WATCHER DOWN")
    assert "1 process source(s) need a watcher" in done.stderr
    # Each harness's model is told what its protocol allows, never what it forbids.
    said = {"codex": "`fm checkpoint --seconds 600`", "grok": "run `fm arm` as a tracked",
            "omp": "do not run `fm arm` yourself"}[harness]
    assert said in done.stderr


@pytest.mark.parametrize("harness", ["cursor", "pi", "opencode"])
def test_passive_harnesses_get_one_follow_up(grig: Rig, harness: str) -> None:
    done = run_guard(grig, harness, STOP)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("FIRSTMATE_OP: WATCHER DOWN")
    follow = run_guard(grig, harness, {**STOP, "stop_hook_active": True})
    assert (follow.returncode, follow.stdout, follow.stderr) == (0, "", "")


@pytest.mark.parametrize(("case", "payload", "env"), [
    ("empty payload", None, {}),
    ("empty object", {}, {}),
    ("not json", "garbage", {}),
    ("crew environment", STOP, {"FM_CREW": "t1"}),
    ("forced continuation", {**STOP, "stop_hook_active": True}, {}),
])
def test_gates_allow_silently(grig: Rig, case: str, payload: object, env: dict[str, str]) -> None:
    if payload == "garbage":
        done = subprocess.run(
            [sys.executable, "-m", "firstmate", "turnend-guard", "--harness", "codex"],
            input="{not json", capture_output=True, text=True, env=grig.env, timeout=60,
            check=False)
    else:
        done = run_guard(grig, "codex", payload, **env)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), case


def test_crew_worktree_and_no_need_are_inert(grig: Rig, tmp_path: Path) -> None:
    linked = tmp_path / "crew-t1"
    linked.mkdir()
    (linked / ".git").write_text(f"gitdir: {tmp_path}/project/.git/worktrees/t1\n")
    done = run_guard(grig, "codex", {**STOP, "cwd": str(linked)})
    assert (done.returncode, done.stderr) == (0, "")
    os.unlink(grig.home.state / "sources" / "prs.source")
    done = run_guard(grig, "codex", STOP)
    assert (done.returncode, done.stderr) == (0, "")


def _record_lock(rig: Rig, pid: int, harness: str = "unknown") -> None:
    ident = identity_of(pid)
    assert ident is not None
    # (Held for an explicitly named process, as FM_SESSION_HOLDER_PID records it.)
    record = session_lock.SessionRecord(pid=pid, identity=ident.token(), harness=harness,
                                        acquired_at=time.time())
    session_lock._write(rig.home, record)


def test_read_only_session_is_allowed_and_the_owner_is_not(grig: Rig) -> None:
    other = grig.sleeper()
    _record_lock(grig, other.pid)
    done = run_guard(grig, "codex", STOP)
    assert (done.returncode, done.stderr) == (0, "")
    _record_lock(grig, os.getpid())  # this test process is an ancestor of the guard: ours
    assert run_guard(grig, "codex", STOP).returncode == 2


@pytest.mark.parametrize("harness", ["codex", "claude", "cursor"])
def test_a_healthy_watcher_lets_the_turn_end(grig: Rig, harness: str) -> None:
    arm = grig.spawn("arm")
    started_pid(arm.line())
    done = run_guard(grig, harness, STOP)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_stale_beacon_blocks_and_names_the_fix_each_harness_allows(grig: Rig) -> None:
    env = {"FM_GUARD_GRACE": "2"}
    arm = grig.spawn("arm", env=env)
    pid = started_pid(arm.line())
    os.kill(pid, signal.SIGSTOP)
    try:
        eventually("the guard to see the stale beacon",
                   lambda: run_guard(grig, "grok", STOP, **env).returncode == 2)
        done = run_guard(grig, "grok", STOP, **env)
        assert f"watcher pid {pid} is alive but has not polled" in done.stderr
        # Grok's protocol has the model run the arm as a tracked task: it may take over.
        assert "fm arm --take-over" in done.stderr
        # Codex's protocol forbids fm arm: its model is told to run its checkpoint.
        codex = run_guard(grig, "codex", STOP, **env).stderr
        assert "`fm checkpoint --seconds 600` in the foreground" in codex
        assert "fm arm" not in codex
    finally:
        os.kill(pid, signal.SIGCONT)


def _claim(rig: Rig, outcome: str = "arming", *, owner: int | None = None,
           identity: str | None = None, notified: bool = False) -> None:
    """Plant the ledger harness's claim in the core's claim ledger: its owner (a live process
    of the rig's by default) and outcome, and whether the failure notice was delivered."""
    if owner is None:
        owner = grig_owner(rig)
    if identity is None:
        found = identity_of(owner)
        assert found is not None
        identity = found.token()
    db = open_store(rig.home)
    try:
        with db.transaction() as conn:
            conn.execute("DELETE FROM kv WHERE key LIKE 'claude.autoarm%'")
            entry = claimledger.claim_next(conn, "claude", owner, identity)
            if outcome != "arming":
                assert claimledger.commit(conn, "claude", entry.epoch, owner, outcome)
            if notified:
                claimledger.mark_notified(conn, "claude", entry.epoch)
    finally:
        db.close()


#: The live process owning one rig's planted claims, by rig.
_OWNERS: dict[int, int] = {}


def grig_owner(rig: Rig) -> int:
    """A live process that owns the planted claims (started once per rig; the rig reaps it)."""
    if id(rig) not in _OWNERS or all(p.pid != _OWNERS[id(rig)] for p in rig.extra):
        _OWNERS[id(rig)] = rig.sleeper().pid
    return _OWNERS[id(rig)]


def _kv(rig: Rig, key: str) -> str | None:
    db = Store(rig.home)
    try:
        with db.reading() as conn:
            return kv_get(conn, key)
    finally:
        db.close()


QUICK = {"FM_STANDIN_SYNC_WAIT_MS": "0", "FM_STANDIN_BLOCK_BUDGET": "50"}


def test_an_open_claim_of_the_harness_ledger_lets_it_stop(grig: Rig) -> None:
    _claim(grig)
    assert run_guard(grig, "claude", STOP, **QUICK).returncode == 0
    # A claim that is not open (its owner's identity does not match: a recycled pid)
    # suppresses nothing.
    owner = grig_owner(grig)
    _claim(grig, owner=owner, identity=f"{owner}:1.00:feedfeedfeedfeed")
    assert run_guard(grig, "claude", STOP, **QUICK).returncode == 2
    # Another harness's guard never reads this ledger.
    _claim(grig)
    assert run_guard(grig, "codex", STOP).returncode == 2


def test_ledger_wake_budget_fail_open_and_recovery(grig: Rig) -> None:
    env = {"FM_STANDIN_SYNC_WAIT_MS": "0", "FM_STANDIN_BLOCK_BUDGET": "2"}
    _claim(grig, "wake")
    assert run_guard(grig, "claude", STOP, **env).returncode == 0  # a fresh wake
    _claim(grig, "failed", notified=True)
    codes = [run_guard(grig, "claude", {**STOP, "stop_hook_active": True}, **env)
             for _ in range(4)]
    assert [c.returncode for c in codes] == [2, 2, 0, 0]
    assert "UNSUPERVISED" in codes[2].stderr and codes[3].stderr == ""
    assert _kv(grig, claimledger.key("claude", "alarmed")) is not None
    budget_key = guards.budget_key("claude")
    assert budget_key == "guard.claude.budget"
    assert json.loads(_kv(grig, budget_key) or "{}")["blocks"] == 2
    # Positive recovery clears the budget, and the ledger forgets the notice and the alarm.
    arm = grig.spawn("arm")
    started_pid(arm.line())
    assert run_guard(grig, "claude", STOP, **env).returncode == 0
    assert _kv(grig, budget_key) is None
    assert _kv(grig, claimledger.key("claude", "alarmed")) is None
    assert _kv(grig, claimledger.key("claude", "notified")) is None


def test_claude_waits_briefly_for_a_watcher_coming_up(grig: Rig) -> None:
    guard = subprocess.Popen(
        [sys.executable, "-m", "firstmate", "turnend-guard", "--harness", "claude"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**grig.env, "FM_STANDIN_SYNC_WAIT_MS": "60000"},
    )
    assert guard.stdin is not None
    guard.stdin.write(json.dumps(STOP))
    guard.stdin.close()
    arm = grig.spawn("arm")
    started_pid(arm.line())
    guard.wait(timeout=90)
    assert guard.stdout is not None and guard.stderr is not None
    out, err = guard.stdout.read(), guard.stderr.read()
    guard.stdout.close()
    guard.stderr.close()
    assert (guard.returncode, out, err) == (0, "", "")


# --- the pull guard for real ---------------------------------------------------------------------


def test_pull_guard_episodes_with_real_watchers(grig: Rig) -> None:
    first = run_pull(grig)
    assert first.returncode == 0 and first.stdout == ""
    assert first.stderr.splitlines()[0] == "●  WATCHER DOWN - SUPERVISION IS OFF"
    second = run_pull(grig)
    assert second.stderr.startswith("WARNING: watcher still down (same no-watcher episode")
    assert len(second.stderr.splitlines()) == 1
    env = {"FM_GUARD_GRACE": "2"}
    arm = grig.spawn("arm", env=env)
    pid = started_pid(arm.line())
    assert run_pull(grig, **env).stderr == ""  # healthy: silent, and the episode is over
    os.kill(pid, signal.SIGSTOP)
    try:
        eventually("a stale-beacon banner", lambda: "stale" in run_pull(grig, **env).stderr)
        again = run_pull(grig, **env)
        assert again.stderr.startswith("WARNING: watcher still down (same stale-beacon episode")
    finally:
        os.kill(pid, signal.SIGCONT)
    os.kill(pid, signal.SIGKILL)
    eventually("a fresh banner for the no-watcher episode",
               lambda: run_pull(grig).stderr.startswith("●  WATCHER DOWN"))


def test_pull_guard_advice_follows_the_primary_sessions_harness(grig: Rig) -> None:
    # The pull guard is not told its harness: the session lock's record names the primary's.
    for harness, said in (("claude", "do not run `fm arm` yourself: claude's Stop hook"),
                          ("codex", "run `fm checkpoint --seconds 600` in the foreground")):
        _record_lock(grig, os.getpid(), harness)
        text = run_pull(grig).stderr
        assert said in text and "tracked background task" not in text, text


def test_pull_guard_counts_only_the_callers_rows(grig: Rig) -> None:
    os.unlink(grig.home.state / "sources" / "prs.source")  # no need: no WATCHER DOWN banner
    grig.append("signal", "t1.status", "signal: t1 done")
    second = grig.append("stale", "w2", "stale: w2")
    assert run_pull(grig).stderr.startswith("WARNING: 2 queued wake row(s) pending")
    owner = grig.sleeper()
    db = open_store(grig.home)
    try:
        grants.activate(db, owner.pid, "g1")
        grants.publish(db, "g1", [second])
    finally:
        db.close()
    lines = run_pull(grig).stderr.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("WARNING: 1 queued wake row(s) pending")
    assert lines[1].startswith(f"NOTE: 1 queued wake row(s) ({second}) are held by the live "
                                f"supervision branch (pid {owner.pid}, grant g1)")
    branch = run_pull(grig, "--actor", "branch")
    assert "queued" not in branch.stderr
    owner.kill()
    owner.wait()
    assert "held by" not in run_pull(grig).stderr  # a gone owner holds nothing


def test_pull_guard_always_exits_zero(tmp_path: Path) -> None:
    bad = tmp_path / "file"
    bad.write_text("not a home\n")
    env = {**os.environ, "FM_HOME": str(bad)}
    done = subprocess.run([sys.executable, "-m", "firstmate", "guard", "--bogus"],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0
    assert done.stdout == ""


def test_bad_turnend_guard_arguments_never_block(tmp_path: Path) -> None:
    env = {**os.environ, "FM_HOME": str(tmp_path / "home")}
    for args in (["--bogus"], [], ["--harness", "Bad Name"]):
        done = subprocess.run([sys.executable, "-m", "firstmate", "turnend-guard", *args],
                              input="{}", capture_output=True, text=True, env=env, timeout=60,
                              check=False)
        assert done.returncode == 1, args
        assert done.stderr.startswith("fm: ") and done.stderr.count("\n") == 1


def test_a_failure_shown_to_a_model_keeps_the_facts_and_drops_operator_advice() -> None:
    from firstmate.base.waketext import compose, facts_only

    line = ("watcher: FAILED - live watcher pid=7 has a stale beacon (900s, grace 300s); left "
            "running - inspect it, or replace it with fm arm --take-over")
    assert facts_only(line) == ("watcher: FAILED - live watcher pid=7 has a stale beacon (900s, "
                                "grace 300s)")
    text = compose((), line, "Codex")
    assert "stale beacon" in text and "--take-over" not in text
    assert "never arm the watcher by hand" in text


def test_the_pull_guard_loads_no_plugin_when_no_project_dir_variable_is_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from firstmate.guards import pull
    from firstmate.plugin import manager

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("the plugins were loaded")

    monkeypatch.setattr(manager, "load", refuse)
    assert pull._installed_project_env({"HOME": "/h", "FM_PROJECT_DIR": "/p"}) == ()


def test_a_project_dir_variable_must_say_so_in_its_name() -> None:
    from firstmate.plugin.harness import HarnessInfo

    with pytest.raises(ValueError, match="_PROJECT_DIR"):
        HarnessInfo(name="x", display_name="X", family="hook", rearm_owner="hook",
                    wake_channel="w", project_env=("X_ROOT",))
