"""The wake queue: append, claims, drain presentation, acknowledgement and unusable rows."""

from __future__ import annotations

import os

import pytest
from firstmate.base.errors import UsageError
from firstmate.store import drain as drainmod
from firstmate.store import episodes, queue, queuestatus
from firstmate.store.database import Store
from firstmate.store.episodes import Episode
from firstmate.store.home import Home
from firstmate.store.locks import FileLock
from firstmate.store.queue import PAYLOAD_MAX, TRUNCATION_MARKER, WakeRow
from hypothesis import given
from hypothesis import strategies as st
from wakeq_support import claims, db_for, episode, generation, insert_row, raw, rows, set_episode


@pytest.fixture
def db(fm_home: Home) -> Store:
    return db_for(fm_home)


def ack(db: Store, through: int, gen: str, actor: str = "main") -> drainmod.AckResult:
    return drainmod.acknowledge(db, actor, through, gen, env={})


def drain(db: Store, actor: str = "main") -> drainmod.DrainResult:
    return drainmod.drain(db, actor, env={})


# --- append ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "key"), [("bogus", "k"), ("SIGNAL", "k"), ("", "k"),
                                           ("signal", ""), ("signal", "   "), ("stale", "\x1b[0m")])
def test_bad_append_is_a_usage_error_and_writes_nothing(db: Store, fm_home: Home, kind: str, key: str) -> None:
    with pytest.raises(UsageError) as err:
        queue.append(db, kind, key, "payload")
    assert err.value.exit_code == 2
    assert "\n" not in err.value.message
    assert rows(fm_home) == []
    assert isinstance(episode(db), episodes.Missing)


def test_bad_kind_message_names_the_valid_kinds(db: Store) -> None:
    with pytest.raises(UsageError, match="expected signal, stale, check or heartbeat"):
        queue.append(db, "alarm", "k", "p")


def test_append_returns_increasing_sequences_and_publishes_downtime(db: Store, fm_home: Home) -> None:
    seqs = [queue.append(db, kind, f"k{i}", f"p{i}") for i, kind in enumerate(queue.KINDS)]
    assert seqs == [1, 2, 3, 4]
    state = episode(db)
    assert isinstance(state, Episode) and (state.status, state.kind) == ("pending", "downtime")
    assert [r[:4] for r in rows(fm_home)] == [(1, "signal", "k0", "p0"), (2, "stale", "k1", "p1"),
                                              (3, "check", "k2", "p2"), (4, "heartbeat", "k3", "p3")]
    assert all(r[4] is None for r in rows(fm_home))  # appended rows are unowned


def test_append_reuses_a_pending_generation_and_reopens_an_announced_one(db: Store) -> None:
    queue.append(db, "signal", "a", "1")
    first = generation(db)
    queue.append(db, "signal", "b", "2")
    assert generation(db) == first
    with db.transaction() as conn:
        episodes.arm_check(conn, True)
    queue.append(db, "signal", "c", "3")
    state = episode(db)
    assert isinstance(state, Episode) and state.status == "pending" and state.generation != first


def test_sequence_is_never_reused_after_the_queue_empties(db: Store) -> None:
    s1 = queue.append(db, "signal", "a", "x")
    d = drain(db)
    assert d.generation is not None
    ack(db, s1, d.generation)
    assert queuestatus.query(db).depth == 0
    assert queue.append(db, "signal", "a", "x") == s1 + 1


def test_control_characters_and_escapes_are_neutralised(db: Store, fm_home: Home) -> None:
    payload = "a\tb\rc\nd\x1b[31mred\x1b[0m \x1b]0;title\x07t \x1b]8;;http://x\x1b\\link \x00\x07\x7f\u2028e"
    queue.append(db, "signal", "k\ty\x1bZ", payload)
    (_, _, key, stored, _), = rows(fm_home)
    assert key == "k y"
    assert stored == "a b c dred t link  e"
    assert not any(ord(ch) < 32 or 0x7F <= ord(ch) <= 0x9F for ch in stored)


@given(st.text(max_size=300))
def test_clean_is_one_line_without_controls_and_idempotent(text: str) -> None:
    out = queue.clean(text)
    assert "\n" not in out and "\t" not in out and "\r" not in out and "\x1b" not in out
    assert not any(ord(ch) < 32 or 0x7F <= ord(ch) <= 0x9F for ch in out)
    assert len(out.splitlines()) <= 1
    assert queue.clean(out) == out


def test_long_payload_is_cut_with_the_documented_marker(db: Store, fm_home: Home) -> None:
    queue.append(db, "check", "k", "x" * 10_000)
    stored = str(rows(fm_home)[0][3])
    assert len(stored) == PAYLOAD_MAX
    assert stored.endswith(TRUNCATION_MARKER)
    queue.append(db, "check", "k2", "y" * PAYLOAD_MAX)
    assert rows(fm_home)[1][3] == "y" * PAYLOAD_MAX  # exactly at the bound: untouched


def test_append_rings_the_watchers_doorbell(db: Store, fm_home: Home) -> None:
    from firstmate.store.doorbell import Doorbell

    bell = Doorbell(fm_home)
    if not bell.open():
        pytest.skip("doorbell address busy")
    try:
        queue.append(db, "signal", "k", "p")
        assert bell.wait(10.0)
    finally:
        bell.close()


# --- actor and settings ------------------------------------------------------------------------


def test_actor_comes_from_argument_then_environment() -> None:
    assert queue.resolve_actor(None, {}) == "main"
    assert queue.resolve_actor(None, {"FM_SUPERVISION_ACTOR": "branch"}) == "branch"
    assert queue.resolve_actor("main", {"FM_SUPERVISION_ACTOR": "branch"}) == "main"
    with pytest.raises(UsageError, match="expected main or branch") as err:
        queue.resolve_actor(None, {"FM_SUPERVISION_ACTOR": "captain"})
    assert "FM_SUPERVISION_ACTOR" in err.value.message
    with pytest.raises(UsageError, match="expected main or branch"):
        queue.resolve_actor("both", {})


@pytest.mark.parametrize(("raw_value", "seconds"), [
    ("", 10), ("3", 3), ("08", 8), ("0", 10), ("00", 10), ("-1", 10), ("1.5", 10), ("ten", 10),
    (" 4 ", 4), ("٣", 10),
])
def test_presentation_lock_timeout_accepts_positive_integers_only(raw_value: str, seconds: int) -> None:
    assert queue.lock_timeout({"FM_STATUS_PRESENTATION_LOCK_TIMEOUT": raw_value}) == seconds


# --- drain -----------------------------------------------------------------------------------


def test_drain_dedupes_by_kind_and_key_keeping_first_order_and_last_payload(db: Store) -> None:
    queue.append(db, "signal", "t1.status", "first t1")
    queue.append(db, "stale", "w1", "stale: w1")
    queue.append(db, "heartbeat", "heartbeat", "heartbeat one")
    queue.append(db, "signal", "t1.status", "second t1")
    queue.append(db, "stale", "t1.status", "same key other kind")
    queue.append(db, "heartbeat", "other-key", "heartbeat two")
    result = drain(db)
    assert [(r.seq, r.kind, r.key, r.payload) for r in result.rows] == [
        (4, "signal", "t1.status", "second t1"),
        (2, "stale", "w1", "stale: w1"),
        (6, "heartbeat", "other-key", "heartbeat two"),
        (5, "stale", "t1.status", "same key other kind"),
    ]
    assert result.ack_through == 6


def test_drain_claims_for_main_moves_the_episode_to_handling_and_prints_the_ack(db: Store, fm_home: Home) -> None:
    queue.append(db, "signal", "a", "one")
    queue.append(db, "signal", "b", "two")
    gen = generation(db)
    result = drain(db)
    assert result.generation == gen and result.ack_through == 2
    assert result.ack_required == (
        f"WAKE_ACK_REQUIRED: after handling completes run fm wake drain --ack-through 2 "
        f"--recovery-generation {gen}"
    )
    assert claims(fm_home) == {1: "main", 2: "main"}
    assert episode(db) == Episode("pending", "handling", gen)
    assert [r.line() for r in result.rows] == ["1\tsignal\ta\tone", "2\tsignal\tb\ttwo"]


def test_redrain_presents_the_same_rows_until_acknowledged(db: Store) -> None:
    queue.append(db, "signal", "a", "one")
    first = drain(db)
    second = drain(db)
    assert first.rows == second.rows and first.ack_command == second.ack_command


def test_drain_of_an_empty_queue_with_an_open_episode_asks_for_ack_through_zero(db: Store, fm_home: Home) -> None:
    set_episode(fm_home, "pending", "downtime", "seed.1.aaa")
    result = drain(db)
    assert result.rows == () and result.ack_through == 0
    assert result.ack_required == (
        "WAKE_ACK_REQUIRED: after handling completes run fm wake drain --ack-through 0 "
        "--recovery-generation seed.1.aaa"
    )
    assert episode(db) == Episode("pending", "handling", "seed.1.aaa")
    outcome = ack(db, 0, "seed.1.aaa")
    assert outcome.retired and outcome.notices == ()
    assert episode(db) == Episode("acked", "handling", "seed.1.aaa")
    assert drain(db).ack_required is None  # nothing left to acknowledge


def test_drain_with_nothing_at_all_requires_nothing(db: Store) -> None:
    result = drain(db)
    assert result == drainmod.DrainResult(actor="main")
    assert result.ack_required is None


@pytest.mark.parametrize("initial", ["missing", "acked", "invalid"])
def test_rows_without_an_open_episode_get_a_fresh_generation(db: Store, fm_home: Home, initial: str) -> None:
    insert_row(fm_home, 7, "signal", "legacy", "row from an older version", at=5.0)
    if initial == "acked":
        set_episode(fm_home, "acked", "downtime", "old.1.x")
    elif initial == "invalid":
        set_episode(fm_home, "?", "?", "?")
    result = drain(db)
    assert result.ack_through == 7 and result.generation not in (None, "old.1.x")
    assert episode(db) == Episode("pending", "handling", str(result.generation))


def test_drain_skips_and_changes_nothing_while_the_queue_lock_is_held(db: Store, fm_home: Home) -> None:
    queue.append(db, "signal", "a", "one")
    before = (rows(fm_home), episode(db))
    holder = FileLock(fm_home.lock_path("queue"), "queue", fm_home.root)
    holder.acquire()
    try:
        result = drainmod.drain(db, "main", env={"FM_STATUS_PRESENTATION_LOCK_TIMEOUT": "1"})
    finally:
        holder.release()
    assert result.skipped == (
        f"WAKE DRAIN SKIPPED: queue lock remains held by live pid {os.getpid()} after 1s; "
        "retry on the next drain."
    )
    assert result.rows == () and result.ack_required is None
    assert (rows(fm_home), episode(db)) == before


# --- acknowledge -----------------------------------------------------------------------------


def test_ack_deletes_only_rows_at_or_below_the_cutoff_and_keeps_the_episode_open(db: Store, fm_home: Home) -> None:
    for k in "abc":
        queue.append(db, "signal", k, k)
    gen = drain(db).generation
    assert gen is not None
    result = ack(db, 2, gen)
    assert (result.consumed, result.retired, result.moved, result.notices) == (2, False, False, ())
    assert [r[0] for r in rows(fm_home)] == [3]
    assert episode(db) == Episode("pending", "handling", gen)
    result = ack(db, 3, gen)
    assert (result.consumed, result.retired) == (1, True)
    assert episode(db) == Episode("acked", "handling", gen)


def test_a_row_appended_after_presentation_survives_the_ack_and_keeps_the_episode(db: Store, fm_home: Home) -> None:
    queue.append(db, "signal", "a", "x")
    presented = drain(db)
    late = queue.append(db, "signal", "late", "arrived while handling")
    assert presented.generation is not None and presented.ack_through is not None
    result = ack(db, presented.ack_through, presented.generation)
    assert result.consumed == 1 and not result.retired and not result.moved
    assert claims(fm_home) == {late: None}  # above the cutoff: unowned, a grant may still take it
    state = episode(db)
    assert isinstance(state, Episode) and state.status == "pending"
    assert state.generation == presented.generation  # pending handling → pending downtime, same gen
    again = drain(db)
    assert [r.seq for r in again.rows] == [late] and again.generation == presented.generation


def test_an_ack_beyond_the_last_presented_row_is_refused_and_consumes_nothing(db: Store, fm_home: Home) -> None:
    queue.append(db, "signal", "a", "1")
    presented = drain(db)
    late = queue.append(db, "signal", "b", "never presented")
    gen = presented.generation
    assert gen is not None
    before = (rows(fm_home), episode(db))
    with pytest.raises(UsageError) as err:
        ack(db, 99, gen)
    assert err.value.message == (
        "wake drain: --ack-through 99 is beyond the last wake row presented to you (1); nothing "
        f"was acknowledged: run fm wake drain --ack-through 1 --recovery-generation {gen} after "
        "handling it"
    )
    assert (rows(fm_home), episode(db)) == before
    with pytest.raises(UsageError, match=f"through {late} is beyond .* presented to you \\(1\\)"):
        ack(db, late, gen)
    assert ack(db, 1, gen).consumed == 1
    assert claims(fm_home) == {late: None}  # the late row waits for the next drain


def test_an_ack_without_any_drain_is_refused(db: Store, fm_home: Home) -> None:
    queue.append(db, "signal", "a", "1")
    with pytest.raises(UsageError) as err:
        ack(db, 1, generation(db))  # never drained: nothing was presented, nothing is claimed
    assert err.value.message == (
        "wake drain: --ack-through 1 is beyond the last wake row presented to you (none); nothing "
        "was acknowledged: re-run fm wake drain and use the WAKE_ACK_REQUIRED command it prints"
    )
    assert claims(fm_home) == {1: None}


def test_repeating_a_completed_ack_is_a_silent_no_op(db: Store, fm_home: Home) -> None:
    queue.append(db, "signal", "a", "1")
    presented = drain(db)
    assert presented.generation is not None
    assert ack(db, 1, presented.generation).retired
    again = ack(db, 1, presented.generation)  # e.g. a retried command
    assert (again.consumed, again.retired, again.notices) == (0, True, ())


def test_an_unknown_generation_consumes_the_rows_and_leaves_the_episode_open(db: Store, fm_home: Home) -> None:
    queue.append(db, "signal", "a", "1")
    queue.append(db, "signal", "b", "2")
    presented = drain(db)
    gen = presented.generation
    assert gen is not None
    result = ack(db, 1, "made.up.gen")
    assert (result.consumed, result.retired, result.moved) == (1, False, True)
    # Row 2 is still presented and the episode is the one the drain named: the exact command.
    assert result.notices == (
        "wake drain: acknowledged wakes through 1 (1 row(s) consumed), but recovery generation "
        f"made.up.gen was never printed by a drain (the current episode is pending:handling:{gen}"
        f"), so the episode stays open: run fm wake drain --ack-through 2 --recovery-generation "
        f"{gen} after handling it",
    )
    assert [r[0] for r in rows(fm_home)] == [2]
    assert episode(db) == Episode("pending", "handling", gen)
    assert ack(db, 2, gen).retired


def test_an_unknown_generation_with_nothing_open_still_consumes(db: Store, fm_home: Home) -> None:
    set_episode(fm_home, "acked", "handling", "done.1.a")
    result = ack(db, 0, "stale.9.z")
    assert (result.consumed, result.retired, result.moved) == (0, False, False)
    assert result.notices == (
        "wake drain: acknowledged wakes through 0 (0 row(s) consumed), but recovery generation "
        "stale.9.z was never printed by a drain (the current episode is acked:handling:done.1.a)"
        "; nothing to retire",
    )
    assert episode(db) == Episode("acked", "handling", "done.1.a")


def test_generation_mismatch_still_consumes_rows_and_names_the_remedy(db: Store, fm_home: Home) -> None:
    queue.append(db, "signal", "a", "1")
    presented = drain(db)
    assert presented.generation is not None
    with db.transaction() as conn:
        episodes.publish_handling(conn)  # the episode moved on (a new handling generation)
    newer = generation(db)
    result = ack(db, 1, presented.generation)
    assert result.consumed == 1 and result.moved and not result.retired
    assert result.notices == (
        "wake drain: acknowledged wakes through 1 (1 row(s) consumed), but a newer recovery "
        "episode is pending; re-run fm wake drain and use the new WAKE_ACK_REQUIRED command",
    )
    assert rows(fm_home) == []
    assert episode(db) == Episode("pending", "handling", newer)


def test_ack_that_removes_nothing_names_the_exact_command_for_the_waiting_row(db: Store) -> None:
    queue.append(db, "signal", "a", "1")
    queue.append(db, "signal", "b", "2")
    presented = drain(db)
    gen = presented.generation
    assert gen is not None
    result = ack(db, 0, gen)
    assert result.consumed == 0 and not result.retired
    assert result.notices == (
        "wake drain: nothing was acknowledged through 0 (none of your presented wake rows is at "
        f"or below it); the current wake is row 2: run fm wake drain --ack-through 2 "
        f"--recovery-generation {gen} after handling it",
    )


def test_ack_of_an_older_printed_generation_with_nothing_open_says_so(db: Store, fm_home: Home) -> None:
    set_episode(fm_home, "pending", "downtime", "old.1.a")
    assert drain(db).generation == "old.1.a"  # printed: a known generation from now on
    set_episode(fm_home, "acked", "handling", "done.1.a")
    result = ack(db, 0, "old.1.a")
    assert not result.retired and not result.moved and result.consumed == 0
    assert result.notices == (
        "wake drain: recovery generation old.1.a is not the current episode "
        "(acked:handling:done.1.a); nothing more to retire",
    )


def test_ack_arguments_are_validated(db: Store) -> None:
    with pytest.raises(UsageError, match="invalid acknowledgement sequence"):
        drainmod.acknowledge(db, "main", "12a", "g", env={})
    with pytest.raises(UsageError, match="requires its recovery generation"):
        drainmod.acknowledge(db, "main", 1, "", env={})
    with pytest.raises(UsageError, match="invalid recovery generation"):
        drainmod.acknowledge(db, "main", 1, "a b", env={})


def test_ack_of_ten_thousand_rows_consumes_them_all(db: Store, fm_home: Home) -> None:
    with queue.locked(db) as conn:
        for i in range(10_000):
            queue.append_locked(conn, "signal", f"k{i}", f"p{i}")
    presented = drain(db)
    assert len(presented.rows) == 10_000 and presented.ack_through == 10_000
    assert presented.generation is not None
    result = ack(db, 10_000, presented.generation)
    assert result.consumed == 10_000 and result.retired


# --- unusable rows ---------------------------------------------------------------------------


def test_main_drain_retires_unusable_rows_verbatim_and_still_presents_the_rest(db: Store, fm_home: Home) -> None:
    queue.append(db, "signal", "good", "usable row")
    insert_row(fm_home, 10, kind="bogus", key="k", payload="bad kind")
    insert_row(fm_home, 11, kind="signal", key="", payload="empty key")
    insert_row(fm_home, 12, kind="signal", key="k", payload=None)
    insert_row(fm_home, 13, kind=b"signal", key="k", payload="blob kind")
    insert_row(fm_home, -4, kind="signal", key="k", payload="negative seq")
    insert_row(fm_home, 14, kind="stale", key="k", payload="bad epoch", at="yesterday")
    with raw(fm_home) as conn:
        conn.execute("INSERT INTO wakes (seq, at, kind, key, payload) VALUES "
                     "(15, 1, 'signal', 'k', CAST(X'66FF6F' AS TEXT))")
    result = drain(db)
    assert [r.payload for r in result.rows] == ["usable row"]
    assert result.notices[0] == ("wake drain: retired 7 unusable queue row(s) that could not be "
                                 "presented or acknowledged:")
    quoted = result.notices[1:]
    assert len(quoted) == 7 and all(line.startswith("wake drain:   ") for line in quoted)
    assert "wake drain:   1.0\t10\tbogus\tk\tbad kind" in quoted
    assert any("yesterday" in line and "bad epoch" in line for line in quoted)
    assert any("\\xff" in line for line in quoted)  # undecodable bytes shown, not dropped
    assert [r[0] for r in rows(fm_home)] == [1]
    with raw(fm_home) as conn:
        assert conn.execute("SELECT count(*) FROM set_aside WHERE what = 'wake-row'").fetchone()[0] == 7


def test_retirement_report_is_bounded_to_twenty_plus_a_count(db: Store, fm_home: Home) -> None:
    for i in range(25):
        insert_row(fm_home, 100 + i, kind="nope", payload=f"bad {i}")
    result = drain(db)
    assert result.notices[0].startswith("wake drain: retired 25 unusable")
    assert len(result.notices) == 1 + 20 + 1
    assert result.notices[-1] == "wake drain:   ... 5 further unusable row(s) not shown"
    assert result.rows == () and rows(fm_home) == []


def test_a_retirement_that_fails_is_reported_and_never_fails_the_drain(db: Store, fm_home: Home) -> None:
    queue.append(db, "signal", "good", "still presented")
    insert_row(fm_home, 50, kind="bogus", payload="cannot delete me")
    with raw(fm_home) as conn:
        conn.execute("CREATE TRIGGER keep BEFORE DELETE ON wakes WHEN old.kind = 'bogus' "
                     "BEGIN SELECT RAISE(ABORT, 'refused by test'); END")
    result = drain(db)
    assert [r.payload for r in result.rows] == ["still presented"]
    assert len(result.notices) == 1
    assert "could not be retired" in result.notices[0]
    assert "continuing with the rows that remain usable" in result.notices[0]
    assert claims(fm_home) == {1: "main", 50: None}  # the unusable row is never claimed


def test_unusable_rows_count_for_main_and_are_excluded_from_rows_after(db: Store, fm_home: Home) -> None:
    queue.append(db, "signal", "a", "1")
    insert_row(fm_home, 9, kind="bogus")
    queue.append(db, "stale", "b", "2")
    with db.reading() as conn:
        assert queue.depth(conn) == 3
        assert queue.unusable_count(conn) == 1
        assert queuestatus.pending_count(conn, "main") == 3
        assert queuestatus.pending_count(conn, "branch") == 0
        assert [r.seq for r in queue.rows_after(conn, 0)] == [1, 10]
        assert [r.seq for r in queue.rows_after(conn, 1)] == [10]
        oldest = queue.oldest(conn)
        assert isinstance(oldest, WakeRow) and oldest.seq == 1


def test_query_snapshot(db: Store) -> None:
    empty = queuestatus.query(db)
    assert (empty.depth, empty.oldest, empty.pending_main, empty.last_seq) == (0, None, 0, 0)
    queue.append(db, "signal", "a", "1")
    snap = queuestatus.query(db).to_json()
    assert snap["depth"] == 1 and snap["pending"] == {"main": 1, "branch": 0}
    assert str(snap["episode"]).startswith("pending:downtime:")
    assert snap["episode_state"] == "valid" and snap["grant"] is None
