"""Rows handed back from a supervision-branch grant must be presented before main consumes them.

Main's acknowledgement claims never-owned rows at or below its cutoff (SPEC §4), but a row a
branch grant held and gave back (released, deactivated, or reclaimed after its owner died) was
never shown to main: it is marked ``returned`` and only main's next drain may take it, so every
appended wake is presented and acknowledged exactly once (SPEC §10). The last test is the order
where the drain itself reclaims.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from chaos_support import base_env
from firstmate.store import drain, grants, queue
from firstmate.store.database import Store, open_store
from firstmate.store.home import Home


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Store]:
    store = open_store(Home(tmp_path / "home").ensure())
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE, env=base_env(tmp_path / "home"))
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdin is not None
        proc.stdin.close()


def _branch_holds_first_row(db: Store, owner: subprocess.Popen[bytes]) -> tuple[int, int]:
    first = queue.append(db, "signal", "held-by-branch", "signal: held by the branch")
    second = queue.append(db, "signal", "main-row", "signal: main's row")
    grants.activate(db, owner.pid, "g1")
    grants.publish(db, "g1", [first])
    return first, second


def _main_sees_it_after_ack(db: Store, held: int, second: int,
                            hand_back: Callable[[], object]) -> None:
    """Main drains (the branch still holds its row), the row is handed back, main acknowledges
    what it was shown: the handed-back row must still be there for main's next drain."""
    shown = drain.drain(db, "main", env={})
    assert [r.seq for r in shown.rows] == [second]
    hand_back()
    assert shown.ack_through is not None and shown.generation is not None
    done = drain.acknowledge(db, "main", shown.ack_through, shown.generation, env={})
    assert done.consumed == 1, "main's acknowledgement consumed a row it was never shown"
    again = drain.drain(db, "main", env={})
    assert [r.seq for r in again.rows] == [held], "the handed-back row was never presented"


def test_a_gone_branch_owners_row_is_presented_to_main_not_consumed_unseen(
        db: Store, owner: subprocess.Popen[bytes]) -> None:
    held, second = _branch_holds_first_row(db, owner)

    def die() -> None:
        owner.kill()
        owner.wait()

    _main_sees_it_after_ack(db, held, second, die)


def test_a_released_row_is_presented_to_main_not_consumed_unseen(
        db: Store, owner: subprocess.Popen[bytes]) -> None:
    held, second = _branch_holds_first_row(db, owner)
    _main_sees_it_after_ack(db, held, second, lambda: grants.release(db, "g1"))


def test_a_deactivated_grants_row_is_presented_to_main_not_consumed_unseen(
        db: Store, owner: subprocess.Popen[bytes]) -> None:
    held, second = _branch_holds_first_row(db, owner)
    _main_sees_it_after_ack(db, held, second, lambda: grants.deactivate(db, owner.pid, "g1"))


def test_a_drain_that_reclaims_presents_the_rows_it_takes_back(
        db: Store, owner: subprocess.Popen[bytes]) -> None:
    held, second = _branch_holds_first_row(db, owner)
    owner.kill()
    owner.wait()
    shown = drain.drain(db, "main", env={})
    assert [r.seq for r in shown.rows] == [held, second]
    assert shown.ack_through is not None and shown.generation is not None
    done = drain.acknowledge(db, "main", shown.ack_through, shown.generation, env={})
    assert done.consumed == 2
