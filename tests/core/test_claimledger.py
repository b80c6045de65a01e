"""The claim ledger as the turn-end guard reads it: only an open, identity-matched, unstuck claim
is deciding; each harness has its own ledger; what an older version recorded still reads."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.continuity import claimledger
from firstmate.continuity.claimledger import ClaimFacts
from firstmate.store.database import kv_set, open_store
from firstmate.store.health import WatcherHealth
from firstmate.store.home import Home
from firstmate.testing import exec_identity

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
          health: WatcherHealth = NONE, harness: str = "acme") -> ClaimFacts:
    db = open_store(home)
    try:
        with db.transaction() as conn:
            conn.execute("DELETE FROM kv WHERE key = ?", (claimledger.key(harness),))
            entry = claimledger.claim_next(conn, harness, pid, token, now=at)
            if outcome != "arming":
                assert claimledger.commit(conn, harness, entry.epoch, pid, outcome, now=at)
            return claimledger.claim_facts(conn, harness, health=health, now=time.time())
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


def test_wake_and_failure_facts(home: Home, owner: subprocess.Popen[bytes]) -> None:
    token = exec_identity(owner).token()
    assert facts(home, token, owner.pid, "wake").fresh_wake
    failed = facts(home, token, owner.pid, "failed")
    assert failed.failed and failed.fresh and not failed.notified


def test_each_harness_has_its_own_ledger_and_keys(home: Home,
                                                  owner: subprocess.Popen[bytes]) -> None:
    token = exec_identity(owner).token()
    facts(home, token, owner.pid, harness="acme")
    db = open_store(home)
    try:
        with db.reading() as conn:
            assert claimledger.read(conn, "acme") is not None
            assert claimledger.read(conn, "other") is None
    finally:
        db.close()
    assert (claimledger.key("acme"), claimledger.key("acme", "notified"),
            claimledger.key("acme", "alarmed")) == (
        "acme.autoarm", "acme.autoarm.notified", "acme.autoarm.alarmed")


def test_a_superseded_owner_cannot_commit(home: Home) -> None:
    db = open_store(home)
    try:
        with db.transaction() as conn:
            first = claimledger.claim_next(conn, "acme", 10, "10:1.00:aa")
            second = claimledger.claim_next(conn, "acme", 11, "11:1.00:bb")
            assert second.epoch == first.epoch + 1
            assert claimledger.commit(conn, "acme", first.epoch, 10, "wake") is False
            assert claimledger.commit(conn, "acme", second.epoch, 11, "wake") is True
            with pytest.raises(ValueError, match="unknown claim outcome"):
                claimledger.commit(conn, "acme", second.epoch, 11, "bogus")
    finally:
        db.close()


def test_an_older_versions_rewake_reads_as_a_wake_and_junk_as_no_claim(home: Home) -> None:
    db = open_store(home)
    try:
        with db.transaction() as conn:
            kv_set(conn, claimledger.key("acme"), '{"epoch": 4, "owner_pid": 9, '
                   '"owner_identity": "9:1.00:aa", "outcome": "rewake", "updated_at": 1.0}')
            entry = claimledger.read(conn, "acme")
            assert entry is not None and (entry.epoch, entry.outcome) == (4, "wake")
            for junk in ("{", "[]", '{"epoch": "4"}', '{"epoch": 1, "owner_pid": 1, '
                         '"owner_identity": "x", "outcome": "?", "updated_at": 1}'):
                kv_set(conn, claimledger.key("acme"), junk)
                assert claimledger.read(conn, "acme") is None
    finally:
        db.close()
