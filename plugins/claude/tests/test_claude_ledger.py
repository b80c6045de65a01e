"""Claude Code declares the claim-ledger park: its Stop and StopFailure hooks, the guard that
cooperates with the ledger, and the knobs and store keys that keep their Claude names."""

from __future__ import annotations

from firstmate.api import ClaimLedgerPark
from firstmate.testing.state import claim_keys, loaded_harness
from firstmate_plugin_claude.hooks import INFO, REARM


def test_the_stop_hooks_are_a_claim_ledger_park_and_the_guard_cooperates() -> None:
    assert isinstance(REARM, ClaimLedgerPark)
    assert REARM.events(INFO) == ("stop", "stop-failure")
    info = loaded_harness("claude")
    assert info is not None and info.guard == REARM.guard and info.guard.claim_ledger


def test_the_knobs_and_keys_keep_their_claude_names() -> None:
    assert (REARM.attempts_env, REARM.attempts) == ("FM_CLAUDE_AUTOARM_ATTEMPTS", 2)
    assert (REARM.cooldown_env, REARM.cooldown_ms) == ("FM_CLAUDE_STOPFAILURE_COOLDOWN_MS", 15000)
    assert (REARM.notices_env, REARM.notices) == ("FM_CLAUDE_AUTOARM_NOTICE_BUDGET", 3)
    assert (REARM.fresh_env, REARM.fresh) == ("FM_CLAUDE_AUTOARM_EPOCH_FRESH", 15.0)
    assert (REARM.guard.block_budget_env, REARM.guard.block_budget) == (
        "FM_CLAUDE_TURNEND_BLOCK_BUDGET", 3)
    assert (REARM.guard.sync_wait_env, REARM.guard.sync_wait_ms) == (
        "FM_CLAUDE_AUTOARM_SYNC_WAIT_MS", 800)
    # A home an older version supervised keeps its ledger: the same store keys.
    assert claim_keys("claude") == (
        "claude.autoarm", "claude.autoarm.notified", "claude.autoarm.alarmed",
        "claude.autoarm.stopfailure_at", "claude.autoarm.notices")
