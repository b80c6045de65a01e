"""The recovery-episode state machine, transition by transition (firstmate-domain §4.3 + deltas)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

import pytest
from firstmate.base.errors import UsageError
from firstmate.store import episodes, queue
from firstmate.store.database import Store
from firstmate.store.episodes import Ack, Action, Episode, Handling, Invalid, Missing
from firstmate.store.home import Home
from wakeq_support import db_for, episode, insert_row, raw, set_episode

G = "seed.1.aaa"
OTHER = "other.2.bbb"

# Initial states: "missing", "invalid", or "status:kind" on generation G.
# Expected final: "missing", "invalid", "status:kind:SAME" (generation G) or "status:kind:NEW".


def arrange(home: Home, initial: str) -> None:
    if initial == "missing":
        return
    if initial == "invalid":
        set_episode(home, "bogus", "downtime", "x y")
        return
    status, kind = initial.split(":")
    set_episode(home, status, kind, G)


def check(db: Store, expected: str) -> None:
    state = episode(db)
    if expected == "missing":
        assert isinstance(state, Missing)
        return
    if expected == "invalid":
        assert isinstance(state, Invalid)
        return
    status, kind, which = expected.split(":")
    assert isinstance(state, Episode), state
    assert (state.status, state.kind) == (status, kind)
    if which == "SAME":
        assert state.generation == G
    else:
        assert state.generation not in (G, OTHER)
        assert episodes.valid_generation(state.generation)


def run(db: Store, op: Callable[..., object], *args: object, **kw: object) -> object:
    with db.transaction() as conn:
        return op(conn, *args, **kw)


PUBLISH_DOWNTIME = [
    ("pending:downtime", False, "pending:downtime:SAME"),
    ("pending:handling", False, "pending:downtime:SAME"),
    ("announced:downtime", False, "announced:downtime:SAME"),
    ("announced:handling", False, "pending:downtime:SAME"),
    ("acked:downtime", False, "pending:downtime:NEW"),
    ("acked:handling", False, "pending:downtime:NEW"),
    ("missing", False, "pending:downtime:NEW"),
    ("invalid", False, "pending:downtime:NEW"),
    ("pending:downtime", True, "pending:downtime:SAME"),
    ("pending:handling", True, "pending:downtime:SAME"),
    ("announced:downtime", True, "pending:downtime:NEW"),
    ("announced:handling", True, "pending:downtime:SAME"),
    ("acked:handling", True, "pending:downtime:NEW"),
]


@pytest.mark.parametrize(("initial", "append", "expected"), PUBLISH_DOWNTIME)
def test_publish_downtime(fm_home: Home, initial: str, append: bool, expected: str) -> None:
    arrange(fm_home, initial)
    db = db_for(fm_home)
    returned = run(db, episodes.publish_downtime, append=append)
    check(db, expected)
    assert returned == episode(db)


@pytest.mark.parametrize("initial", ["missing", "invalid", "pending:downtime", "announced:handling",
                                     "acked:downtime"])
def test_publish_handling_always_opens_a_fresh_pending_handling_generation(fm_home: Home, initial: str) -> None:
    arrange(fm_home, initial)
    db = db_for(fm_home)
    run(db, episodes.publish_handling)
    check(db, "pending:handling:NEW")


BEGIN_HANDLING = [
    ("pending:downtime", None, Handling.STARTED, "pending:handling:SAME"),
    ("announced:downtime", None, Handling.STARTED, "announced:handling:SAME"),
    ("pending:handling", None, Handling.UNCHANGED, "pending:handling:SAME"),
    ("announced:handling", None, Handling.UNCHANGED, "announced:handling:SAME"),
    ("acked:downtime", None, Handling.UNUSABLE, "acked:downtime:SAME"),
    ("missing", None, Handling.UNUSABLE, "missing"),
    ("invalid", None, Handling.UNUSABLE, "invalid"),
    ("pending:downtime", G, Handling.STARTED, "pending:handling:SAME"),
    ("announced:downtime", G, Handling.STARTED, "announced:handling:SAME"),
    ("pending:downtime", OTHER, Handling.MISMATCH, "pending:downtime:SAME"),
    # An already-acknowledged generation confirms as a no-op when the confirmation names it.
    ("acked:handling", G, Handling.ALREADY_ACKED, "acked:handling:SAME"),
    ("acked:handling", OTHER, Handling.MISMATCH, "acked:handling:SAME"),
    ("missing", G, Handling.UNUSABLE, "missing"),
]


@pytest.mark.parametrize(("initial", "expected_gen", "outcome", "final"), BEGIN_HANDLING)
def test_begin_handling(fm_home: Home, initial: str, expected_gen: str | None,
                        outcome: Handling, final: str) -> None:
    arrange(fm_home, initial)
    db = db_for(fm_home)
    assert run(db, episodes.begin_handling, expected_gen) is outcome
    check(db, final)


def test_handling_outcomes_map_to_confirmation_exit_codes() -> None:
    assert [h.exit_code for h in Handling] == [0, 0, 0, 3, 1]


ACKNOWLEDGE = [
    ("pending:downtime", G, Ack.ACKED, "acked:downtime:SAME"),
    ("announced:handling", G, Ack.ACKED, "acked:handling:SAME"),
    ("pending:handling", G, Ack.ACKED, "acked:handling:SAME"),
    ("acked:handling", G, Ack.ALREADY_ACKED, "acked:handling:SAME"),
    ("pending:downtime", OTHER, Ack.MISMATCH, "pending:downtime:SAME"),
    ("missing", G, Ack.MISMATCH, "missing"),
    ("invalid", G, Ack.MISMATCH, "invalid"),
]


@pytest.mark.parametrize(("initial", "gen", "outcome", "final"), ACKNOWLEDGE)
def test_acknowledge(fm_home: Home, initial: str, gen: str, outcome: Ack, final: str) -> None:
    arrange(fm_home, initial)
    db = db_for(fm_home)
    assert run(db, episodes.acknowledge, gen) is outcome
    check(db, final)


@pytest.mark.parametrize("bad", ["", "has space", "colon:inside", "x" * 200, "ünï"])
def test_acknowledge_rejects_malformed_generations_as_usage_errors(fm_home: Home, bad: str) -> None:
    set_episode(fm_home, "pending", "downtime", G)
    db = db_for(fm_home)
    with pytest.raises(UsageError) as err:
        run(db, episodes.acknowledge, bad)
    assert err.value.exit_code == 2
    check(db, "pending:downtime:SAME")


ARM_CHECK = [
    ("missing", True, Action.RECOVER, "announced:downtime:NEW"),
    ("missing", False, Action.NONE, "missing"),
    ("invalid", False, Action.RECOVER, "announced:downtime:NEW"),
    ("invalid", True, Action.RECOVER, "announced:downtime:NEW"),
    ("pending:downtime", False, Action.RECOVER, "announced:downtime:SAME"),
    ("pending:downtime", True, Action.RECOVER, "announced:downtime:SAME"),
    ("pending:handling", True, Action.WAIT, "pending:handling:SAME"),
    ("announced:handling", True, Action.WAIT, "announced:handling:SAME"),
    ("announced:downtime", True, Action.WAIT, "announced:downtime:SAME"),
    ("announced:downtime", False, Action.WAIT, "announced:downtime:SAME"),
    ("acked:handling", True, Action.RECOVER, "announced:downtime:NEW"),
    ("acked:handling", False, Action.NONE, "acked:handling:SAME"),
]


@pytest.mark.parametrize(("initial", "queued", "action", "final"), ARM_CHECK)
def test_arm_check(fm_home: Home, initial: str, queued: bool, action: Action, final: str) -> None:
    arrange(fm_home, initial)
    db = db_for(fm_home)
    assert run(db, episodes.arm_check, queued) is action
    check(db, final)


def test_invalid_episode_is_set_aside_verbatim_before_a_fresh_generation(fm_home: Home) -> None:
    set_episode(fm_home, "announced", "weird-kind", "bad gen!")
    db = db_for(fm_home)
    assert run(db, episodes.arm_check, False) is Action.RECOVER
    with raw(fm_home) as conn:
        kept = list(conn.execute("SELECT what, record FROM set_aside"))
    assert kept == [("episode", "announced:weird-kind:bad gen!")]
    check(db, "announced:downtime:NEW")


def test_non_text_episode_fields_are_invalid(fm_home: Home) -> None:
    set_episode(fm_home, b"pending", "downtime", G)
    db = db_for(fm_home)
    assert isinstance(episode(db), Invalid)
    set_episode(fm_home, "pending", "downtime", 12345)
    assert isinstance(episode(db), Invalid)


def test_reopen_announced_only_for_rows_queued_after_the_announcement(fm_home: Home) -> None:
    db = db_for(fm_home)
    queue.append(db, "signal", "a", "first")
    assert run(db, episodes.arm_check, True) is Action.RECOVER
    announced = episode(db)
    assert isinstance(announced, Episode) and announced.status == "announced"
    # Repeated arms with nothing new: idempotent, the generation stays announced.
    for _ in range(3):
        assert run(db, episodes.reopen_announced) == announced
        assert run(db, episodes.arm_check, True) is Action.WAIT
    assert episode(db) == announced
    # A row queued after the announcement (here written behind the append path's back, so only
    # reopen_announced can notice it) reopens a fresh pending generation exactly once.
    insert_row(fm_home, 99, "signal", "late", "late row", at=1.0)
    reopened = run(db, episodes.reopen_announced)
    assert isinstance(reopened, Episode)
    assert reopened.status == "pending" and reopened.generation != announced.generation
    assert run(db, episodes.arm_check, True) is Action.RECOVER
    assert run(db, episodes.reopen_announced) == episode(db)  # announced again, nothing newer


def test_reopen_announced_leaves_other_states_alone(fm_home: Home) -> None:
    set_episode(fm_home, "pending", "downtime", G)
    insert_row(fm_home, 5)
    db = db_for(fm_home)
    run(db, episodes.reopen_announced)
    check(db, "pending:downtime:SAME")


def test_an_unacknowledged_generation_is_announced_at_most_once(fm_home: Home) -> None:
    db = db_for(fm_home)
    queue.append(db, "signal", "a", "x")
    actions = [run(db, episodes.arm_check, True) for _ in range(5)]
    assert actions == [Action.RECOVER] + [Action.WAIT] * 4
    # A durable append over the announced episode opens a fresh generation that recovers once.
    queue.append(db, "signal", "b", "y")
    actions = [run(db, episodes.arm_check, True) for _ in range(3)]
    assert actions == [Action.RECOVER, Action.WAIT, Action.WAIT]


def test_new_generations_are_pid_epoch_random_and_distinct() -> None:
    gens = {episodes.new_generation() for _ in range(50)}
    assert len(gens) == 50
    for gen in gens:
        assert re.fullmatch(rf"{os.getpid()}\.[0-9]+\.[0-9a-f]+", gen)
        assert episodes.valid_generation(gen)


@pytest.mark.parametrize(("token", "ok"), [
    ("pending:downtime:seed.1.aaa", True), ("acked:handling:g", True),
    ("pending:downtime:", False), ("done:downtime:g", False), ("pending:other:g", False),
    ("pending:downtime:g:h", False), ("pending:downtime:g h", False),
])
def test_parse_token(token: str, ok: bool) -> None:
    parsed = episodes.parse_token(token)
    assert (parsed is not None) == ok
    if parsed is not None:
        assert parsed.token() == token
