"""The auto-arm ledger as the turn-end guard reads it (``firstmate_rearm_ledger``): only an open,
identity-matched, unstuck claim is deciding; the guard's knobs keep their Claude names."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.plugin import manager as plugins
from firstmate.plugin.harness import ClaimFacts
from firstmate.store.database import open_store
from firstmate.store.health import WatcherHealth
from firstmate.store.home import Home
from firstmate.testing import exec_identity
from firstmate_plugin_claude import ledger

NONE = WatcherHealth(False, "none", grace=300.0)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home").ensure()


@pytest.fixture
def owner() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def facts(home: Home, token: str, pid: int, outcome: str = "arming", *, at: float | None = None,
          health: WatcherHealth = NONE) -> ClaimFacts:
    db = open_store(home)
    try:
        with db.transaction() as conn:
            conn.execute("DELETE FROM kv WHERE key = ?", (ledger.LEDGER_KEY,))
            entry = ledger.claim_next(conn, pid, token, now=at)
            if outcome != "arming":
                assert ledger.commit(conn, entry.epoch, pid, outcome, now=at)
            found: ClaimFacts = plugins.load_harness("claude", {}).rearm_ledger("claude") \
                .claim_facts(conn, env={}, health=health, now=time.time())  # type: ignore[union-attr]
            return found
    finally:
        db.close()


def test_only_a_live_identity_matched_open_claim_is_deciding(
        home: Home, owner: subprocess.Popen[bytes]) -> None:
    ident = exec_identity(owner)
    assert facts(home, ident.token(), owner.pid).deciding
    # The same claim under another identity (a recycled pid) decides nothing.
    forged = f"{owner.pid}:{ident.started - 50:.2f}:{ident.cmd_hash}"
    assert not facts(home, forged, owner.pid).deciding
    # A finished claim decides nothing.
    done = facts(home, ident.token(), owner.pid, "clean", at=time.time() - 60)
    assert (done.deciding, done.fresh, done.outcome) == (False, False, "clean")
    # A hung claim: entry and beacon both older than the grace.
    stale = WatcherHealth(False, "none", grace=2.0)
    assert not facts(home, ident.token(), owner.pid, at=time.time() - 10, health=stale).deciding
    # A dead owner.
    owner.kill()
    owner.wait()
    assert not facts(home, ident.token(), owner.pid).deciding


def test_rewake_and_failure_facts(home: Home, owner: subprocess.Popen[bytes]) -> None:
    token = exec_identity(owner).token()
    assert facts(home, token, owner.pid, "rewake").fresh_rewake
    failed = facts(home, token, owner.pid, "failed")
    assert failed.failed and failed.fresh and not failed.notified


def test_the_guard_profile_keeps_the_claude_knobs_and_keys() -> None:
    info = plugins.load_harness("claude", {}).harness("claude")
    assert info is not None and info.guard == ledger.GUARD
    assert ledger.GUARD.rearm_ledger
    assert (ledger.GUARD.block_budget_env, ledger.GUARD.block_budget) == (
        "FM_CLAUDE_TURNEND_BLOCK_BUDGET", 3)
    assert (ledger.GUARD.sync_wait_env, ledger.GUARD.sync_wait_ms) == (
        "FM_CLAUDE_AUTOARM_SYNC_WAIT_MS", 800)
    assert (ledger.LEDGER_KEY, ledger.NOTIFIED_KEY, ledger.ALARMED_KEY) == (
        "claude.autoarm", "claude.autoarm.notified", "claude.autoarm.alarmed")
    assert plugins.load_harness("claude", {}).rearm_ledger("codex") is None
