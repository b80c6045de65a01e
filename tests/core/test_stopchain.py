"""The stop chain's bounds (firstmate.continuity.stopchain), which every checkpoint and parked
stop hook spends from: pure charges, and one record per conversation."""

from __future__ import annotations

import attrs
from firstmate.continuity.stopchain import Bounds, Chain, charge, load, spend
from firstmate.store.home import Home


def test_chain_bounds_are_pure_and_reset_on_a_new_conversation() -> None:
    bounds = Bounds(block_budget=2, same_budget=2, ceiling=4)
    chain = Chain("c")
    for _ in range(2):
        verdict = charge(chain, "wake", ("signal: x",), bounds)
        assert verdict.allowed
        chain = verdict.chain
    assert not charge(chain, "wake", ("signal: x",), bounds).allowed
    verdict = charge(chain, "wake", ("stale: alpha (idle 3m)",), bounds)
    assert verdict.allowed
    chain = verdict.chain
    assert charge(chain, "wake", ("stale: alpha (idle 9m)",), bounds).allowed  # same canonical
    assert not charge(attrs_total(chain, 4), "block", (), bounds).allowed


def attrs_total(chain: Chain, total: int) -> Chain:
    return attrs.evolve(chain, total=total)


def test_chain_record_is_per_conversation(fm_home: Home) -> None:
    bounds = Bounds(block_budget=1)
    assert spend(fm_home, "fakeh", "a", "block", (), bounds).allowed
    assert not spend(fm_home, "fakeh", "a", "block", (), bounds).allowed
    assert spend(fm_home, "fakeh", "b", "block", (), bounds).allowed
    assert load(fm_home, "fakeh", "b", reset=False) == Chain("b", blocks=1, total=1)
    assert spend(fm_home, "fakeh", "b", "block", (), bounds, reset=True).allowed
