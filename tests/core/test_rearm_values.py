"""The values every re-arm strategy is built from: how a hook answers (HookReply) and how a
chain of continuations is bounded (StopChain)."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from firstmate.api import (
    CheckpointGuard,
    ClaimLedgerPark,
    HarnessInfo,
    HookOutcome,
    HookReply,
    ParkedStop,
    StopChain,
)
from firstmate.store.home import Home

BLOCK = HookReply.json("reason", notice_key="systemMessage", decision="block")
FOLLOW_UP = HookReply.json("followup_message", allow_stdout="{}", one_line=True)


def test_the_default_reply_is_exit_2_with_the_text_on_stderr() -> None:
    reply = HookReply()
    assert reply.proceed("FIRSTMATE_OP: wake\n\n") == HookOutcome(2, "", "FIRSTMATE_OP: wake\n")
    assert reply.allow() == HookOutcome.silent()
    assert reply.notice("budget\n  spent") == HookOutcome(0, "", "firstmate: budget spent\n")
    assert reply.passing("") == HookOutcome.silent()
    assert reply.passing("UNSUPERVISED") == HookOutcome(0, "", "UNSUPERVISED\n")


def test_a_json_reply_is_one_object_on_stdout() -> None:
    out = BLOCK.proceed("line one\nline two")
    assert out.exit_code == 0 and out.stderr == ""
    assert list(json.loads(out.stdout).items()) == [("decision", "block"),
                                                     ("reason", "line one\nline two")]
    assert BLOCK.allow() == HookOutcome.silent()
    assert json.loads(BLOCK.notice("not blocking").stdout) == {
        "systemMessage": "Firstmate: not blocking"}


def test_a_follow_up_reply_always_prints_one_object() -> None:
    out = FOLLOW_UP.proceed("FIRSTMATE_OP: a\n  b")
    assert json.loads(out.stdout) == {"followup_message": "FIRSTMATE_OP: a b"}
    assert FOLLOW_UP.allow() == HookOutcome(0, "{}\n", "")
    assert FOLLOW_UP.notice("spent") == HookOutcome(0, "{}\n", "firstmate: spent\n")
    for outcome in (FOLLOW_UP.proceed("x"), FOLLOW_UP.allow(), FOLLOW_UP.notice("y")):
        assert outcome.stdout.count("\n") == 1


def test_a_chain_reads_its_knobs_and_its_conversation() -> None:
    chain = StopChain.knobs("FM_ACME_STOP", ceiling=100, conversation_keys=("conv", "sid"),
                            conversation_env=("ACME_CONV",))
    assert (chain.block_budget_env, chain.same_budget_env, chain.ceiling_env) == (
        "FM_ACME_STOP_BLOCK_BUDGET", "FM_ACME_STOP_SAME_REASON_BUDGET", "FM_ACME_STOP_LOOP_CEILING")
    bounds = chain.bounds({"FM_ACME_STOP_BLOCK_BUDGET": "7", "FM_ACME_STOP_LOOP_CEILING": "x"})
    assert (bounds.block_budget, bounds.same_budget, bounds.ceiling) == (7, 5, 100)
    assert chain.conversation({"conv": "c-1", "sid": "s"}, {}) == "c-1"
    assert chain.conversation({"conv": "", "sid": 4}, {"ACME_CONV": "e-1"}) == "e-1"
    assert chain.conversation({"conv": "a\x00b"}, {}) == ""  # no name takes a control character
    assert chain.conversation({"conv": "x" * 500}, {}) == "x" * 200
    assert chain.conversation({}, {}) == ""


def test_a_chain_spends_restarts_and_resets(tmp_path: Path) -> None:
    home = Home(tmp_path / "home").ensure()
    chain = StopChain(block_budget=2)
    assert chain.spend(home, "acme", "c", "block", {}).allowed
    assert chain.spend(home, "acme", "c", "block", {}).allowed
    spent = chain.spend(home, "acme", "c", "block", {})
    assert not spent.allowed and "2 times" in spent.notice
    assert chain.spend(home, "acme", "c", "block", {}, reset=True).allowed
    chain.restart(home, "acme", "c")
    assert chain.spend(home, "acme", "c", "block", {}).allowed
    # Another harness's chain is its own.
    assert StopChain(block_budget=1).spend(home, "other", "c", "block", {}).allowed


INFO = HarnessInfo(name="acme", display_name="Acme", family="hook", rearm_owner="hook",
                   wake_channel="x", hook_events=("stop", "stop-failure"), rearm_event="stop")


@pytest.mark.parametrize(("strategy", "events"), [
    (ParkedStop(), ("stop",)),
    (CheckpointGuard(), ("stop",)),
    (ClaimLedgerPark(paced_events=("stop-failure",)), ("stop", "stop-failure")),
])
def test_each_strategy_answers_its_events_and_says_how_a_wake_arrives(
        strategy: ParkedStop | CheckpointGuard | ClaimLedgerPark, events: tuple[str, ...]) -> None:
    assert strategy.events(INFO) == events
    assert bool(strategy.receipt) is not isinstance(strategy, CheckpointGuard)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        strategy.reply = HookReply()  # type: ignore[misc]  # a declared value never changes


def test_a_claim_ledger_park_declares_the_guard_that_cooperates_with_it() -> None:
    park = ClaimLedgerPark(block_budget=4, block_budget_env="FM_ACME_BUDGET", sync_wait_ms=5,
                           fresh=9.0, fresh_env="FM_ACME_FRESH")
    guard = park.guard
    assert guard.claim_ledger and guard.loop_flags == () and guard.style == "block"
    assert (guard.block_budget, guard.block_budget_env, guard.sync_wait_ms) == (
        4, "FM_ACME_BUDGET", 5)
    assert (guard.claim_fresh, guard.claim_fresh_env) == (9.0, "FM_ACME_FRESH")
