"""The supervision-branch grant and per-actor claims, with real owner processes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from firstmate.base.errors import ConflictError, FirstmateError, UsageError
from firstmate.base.exitcodes import ExitCode
from firstmate.store import drain as drainmod
from firstmate.store import episodes, grants, identity, queue, queuestatus
from firstmate.store.database import Store
from firstmate.store.episodes import Episode
from firstmate.store.home import Home
from wakeq_support import claims, db_for, episode, finish, insert_row, live_owner, raw, rows

GEN = "branch.1.g"


@pytest.fixture
def db(fm_home: Home) -> Store:
    return db_for(fm_home)


@pytest.fixture
def owner(fm_home: Home) -> Iterator[subprocess.Popen[bytes]]:
    proc = live_owner(fm_home)
    yield proc
    finish(proc)


def fill(db: Store, n: int, kind: str = "signal") -> list[int]:
    return [queue.append(db, kind, f"k{i}", f"payload {i}") for i in range(n)]


def drain(db: Store, actor: str) -> drainmod.DrainResult:
    return drainmod.drain(db, actor, env={})


def ack(db: Store, actor: str, through: int, gen: str) -> drainmod.AckResult:
    return drainmod.acknowledge(db, actor, through, gen, env={})


def test_activate_binds_the_live_owner_identity(db: Store, owner: subprocess.Popen[bytes]) -> None:
    grant = grants.activate(db, owner.pid, GEN)
    live = identity.identity_of(owner.pid)
    assert live is not None
    assert (grant.owner_pid, grant.identity, grant.generation, grant.published) == (
        owner.pid, live.token(), GEN, False)
    with db.reading() as conn:
        assert grants.read(conn) == grant
        assert grants.owner_state(grant) == "live"


@pytest.mark.parametrize(("pid", "gen"), [("0", GEN), ("1", GEN), ("abc", GEN), ("-5", GEN), ("123", "bad gen")])
def test_activate_rejects_bad_arguments(db: Store, pid: str, gen: str) -> None:
    with pytest.raises(UsageError):
        grants.activate(db, pid, gen)


def test_activate_fails_for_a_dead_pid(db: Store, fm_home: Home) -> None:
    proc = live_owner(fm_home)
    pid = proc.pid
    finish(proc)
    with pytest.raises(FirstmateError) as err:
        grants.activate(db, pid, GEN)
    assert err.value.exit_code == ExitCode.FAILED
    with db.reading() as conn:
        assert grants.read(conn) is None


def test_publish_reserves_rows_and_main_never_presents_or_acks_them(
    db: Store, fm_home: Home, owner: subprocess.Popen[bytes]
) -> None:
    fill(db, 4)
    grants.activate(db, owner.pid, GEN)
    assert grants.publish(db, GEN, ["2", "3"]) == (2, 3)
    main = drain(db, "main")
    assert [r.seq for r in main.rows] == [1, 4]
    assert claims(fm_home) == {1: "main", 2: "branch", 3: "branch", 4: "main"}
    assert main.generation is not None
    # Main acknowledging through everything cannot touch the branch's rows.
    result = ack(db, "main", 4, main.generation)
    assert result.consumed == 2 and not result.retired
    assert [r[0] for r in rows(fm_home)] == [2, 3]
    branch = drain(db, "branch")
    assert [r.seq for r in branch.rows] == [2, 3] and branch.ack_through == 3
    assert branch.ack_command == f"fm wake drain --ack-through 3 --recovery-generation {main.generation} --actor branch"
    result = ack(db, "branch", 3, main.generation)
    assert result.consumed == 2 and result.retired
    assert rows(fm_home) == []


def test_branch_ack_cannot_swallow_main_rows(db: Store, fm_home: Home, owner: subprocess.Popen[bytes]) -> None:
    fill(db, 3)
    grants.activate(db, owner.pid, GEN)
    grants.publish(db, GEN, [3])
    main = drain(db, "main")
    assert main.generation is not None
    branch = drain(db, "branch")
    assert branch.ack_through == 3
    result = ack(db, "branch", 3, main.generation)
    assert result.consumed == 1
    assert claims(fm_home) == {1: "main", 2: "main"}


def test_branch_ack_takes_only_what_a_branch_drain_presented(
    db: Store, fm_home: Home, owner: subprocess.Popen[bytes]
) -> None:
    fill(db, 2)
    grants.activate(db, owner.pid, GEN)
    grants.publish(db, GEN, [1, 2])
    gen = str(episode(db).token()).split(":")[2]
    with pytest.raises(UsageError, match=r"--ack-through 2 is beyond the last wake row presented "
                       r"to you \(none\); nothing was acknowledged: re-run fm wake drain --actor branch"):
        ack(db, "branch", 2, gen)  # published, but no branch drain presented them yet
    assert drain(db, "branch").ack_through == 2
    grants.release(db, GEN)  # given back: what the drain presented goes with them
    grants.publish(db, GEN, [1, 2])
    with pytest.raises(UsageError, match="beyond the last wake row presented to you"):
        ack(db, "branch", 2, gen)
    assert claims(fm_home) == {1: "branch", 2: "branch"}
    assert drain(db, "branch").ack_through == 2
    assert ack(db, "branch", 2, gen).consumed == 2


def test_the_branch_command_omits_the_flag_when_the_environment_sets_the_actor(
    db: Store, owner: subprocess.Popen[bytes]
) -> None:
    fill(db, 1)
    grants.activate(db, owner.pid, GEN)
    grants.publish(db, GEN, [1])
    result = drainmod.drain(db, None, env={"FM_SUPERVISION_ACTOR": "branch"})
    assert result.actor == "branch"
    assert result.ack_command is not None and result.ack_command.endswith(
        f"--recovery-generation {result.generation}")


def test_held_line_when_main_has_nothing_but_a_live_grant_holds_rows(
    db: Store, owner: subprocess.Popen[bytes]
) -> None:
    fill(db, 2)
    grants.activate(db, owner.pid, GEN)
    grants.publish(db, GEN, [1, 2])
    result = drain(db, "main")
    assert result.rows == () and result.ack_required is None
    assert result.held == (
        "WAKE ROWS HELD BY SUPERVISION BRANCH: 2 queued row(s) (1,2) are granted to the live "
        "supervision branch, which presents and acknowledges them."
    )


def test_held_line_names_twenty_rows_then_an_ellipsis() -> None:
    line = grants.held_line(list(range(1, 26)))
    assert "25 queued row(s) (1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,...)" in line
    assert "(7)" in grants.held_line([7])


def test_publish_is_refused_with_exit_3_for_a_row_main_claimed(db: Store, owner: subprocess.Popen[bytes]) -> None:
    fill(db, 2)
    drain(db, "main")
    grants.activate(db, owner.pid, GEN)
    with pytest.raises(ConflictError) as err:
        grants.publish(db, GEN, [2])
    assert err.value.exit_code == ExitCode.CONFLICT
    assert "main already claimed row(s) 2" in err.value.message


def test_publish_of_a_row_not_queued_fails_with_exit_1(db: Store, owner: subprocess.Popen[bytes]) -> None:
    fill(db, 1)
    grants.activate(db, owner.pid, GEN)
    with pytest.raises(FirstmateError) as err:
        grants.publish(db, GEN, [1, 9])
    assert type(err.value) is FirstmateError and err.value.exit_code == ExitCode.FAILED
    assert "9" in err.value.message
    with db.reading() as conn:
        assert grants.reserved(conn) == []  # all or nothing


@pytest.mark.parametrize("seqs", [[], ["1", "1"], ["x"], ["0"], ["1.5"], ["-1"]])
def test_publish_needs_distinct_decimal_sequences(db: Store, owner: subprocess.Popen[bytes], seqs: list[str]) -> None:
    fill(db, 1)
    grants.activate(db, owner.pid, GEN)
    with pytest.raises(UsageError):
        grants.publish(db, GEN, seqs)


def test_publish_needs_the_active_generation(db: Store, owner: subprocess.Popen[bytes]) -> None:
    fill(db, 1)
    with pytest.raises(FirstmateError, match="no grant is active"):
        grants.publish(db, GEN, [1])
    grants.activate(db, owner.pid, GEN)
    with pytest.raises(FirstmateError, match=r"not other\.2\.x"):
        grants.publish(db, "other.2.x", [1])


def test_republishing_the_same_set_is_idempotent_and_a_different_set_fails(
    db: Store, owner: subprocess.Popen[bytes]
) -> None:
    fill(db, 3)
    grants.activate(db, owner.pid, GEN)
    grants.publish(db, GEN, [1, 2])
    assert grants.publish(db, GEN, ["2", "1"]) == (2, 1)
    with pytest.raises(FirstmateError, match="already holds rows 1,2"):
        grants.publish(db, GEN, [3])


def test_check_rows_are_main_owned_unless_away(db: Store, fm_home: Home, owner: subprocess.Popen[bytes]) -> None:
    fill(db, 1, kind="check")
    grants.activate(db, owner.pid, GEN)
    with pytest.raises(ConflictError, match="check rows"):
        grants.publish(db, GEN, [1])
    fm_home.away_record.write_text("away\n")
    assert grants.publish(db, GEN, [1]) == (1,)
    assert drain(db, "branch").rows[0].kind == "check"


def test_release_returns_rows_to_main_and_keeps_the_owner(
    db: Store, fm_home: Home, owner: subprocess.Popen[bytes]
) -> None:
    fill(db, 2)
    grants.activate(db, owner.pid, GEN)
    grants.publish(db, GEN, [1, 2])
    with pytest.raises(FirstmateError):
        grants.release(db, "wrong.1.x")
    assert grants.release(db, GEN) == 2
    assert claims(fm_home) == {1: "returned", 2: "returned"}
    assert [r.seq for r in drain(db, "main").rows] == [1, 2]
    with db.reading() as conn:
        grant = grants.read(conn)
    assert grant is not None and not grant.published


def test_deactivate_needs_the_owner_pid_and_generation(db: Store, owner: subprocess.Popen[bytes]) -> None:
    fill(db, 1)
    grants.activate(db, owner.pid, GEN)
    grants.publish(db, GEN, [1])
    with pytest.raises(FirstmateError, match="belongs to pid"):
        grants.deactivate(db, os.getpid(), GEN)
    with pytest.raises(FirstmateError):
        grants.deactivate(db, owner.pid, "wrong.1.x")
    assert grants.deactivate(db, owner.pid, GEN) == 1
    with db.reading() as conn:
        assert grants.read(conn) is None
        assert grants.reserved(conn) == []


def test_main_drain_reclaims_a_grant_whose_owner_is_gone(db: Store, fm_home: Home) -> None:
    fill(db, 2)
    proc = live_owner(fm_home)
    grants.activate(db, proc.pid, GEN)
    grants.publish(db, GEN, [1, 2])
    finish(proc)
    # A branch drain never reclaims: it refuses loudly and changes nothing.
    with pytest.raises(FirstmateError, match="is gone") as err:
        drain(db, "branch")
    assert err.value.exit_code == ExitCode.FAILED
    assert claims(fm_home) == {1: "branch", 2: "branch"}
    result = drain(db, "main")
    assert [r.seq for r in result.rows] == [1, 2]
    assert result.notices == (
        f"wake drain: reclaimed the supervision branch grant of gone pid {proc.pid} "
        f"(generation {GEN}); its rows return to main",
    )
    with db.reading() as conn:
        assert grants.read(conn) is None


def test_main_ack_reclaims_a_reused_pid_grant(db: Store, fm_home: Home) -> None:
    fill(db, 1)
    first = drain(db, "main")
    assert first.generation is not None
    fill(db, 1)
    me = identity.current()
    # Our own pid recorded with another command line: a reused pid, so the owner is gone.
    forged = identity.ProcessIdentity(me.pid, me.started, "0" * 16).token()
    with raw(fm_home) as conn:
        conn.execute("INSERT INTO branch_grant VALUES (1, ?, ?, ?, 0, 1)", (me.pid, forged, GEN))
        conn.execute("UPDATE wakes SET claim = 'branch' WHERE seq = 2")
    result = ack(db, "main", 1, first.generation)
    assert any("reclaimed" in n for n in result.notices)
    # The reclaimed row was never shown to main: it waits for main's next drain.
    assert result.consumed == 1 and not result.retired
    assert claims(fm_home) == {2: grants.RETURNED}
    with pytest.raises(UsageError, match="beyond the last wake row presented to you"):
        ack(db, "main", 2, first.generation)
    shown = drain(db, "main")
    assert [r.seq for r in shown.rows] == [2] and shown.generation is not None
    done = ack(db, "main", 2, shown.generation)
    assert done.consumed == 1 and done.retired


def test_branch_drain_without_a_grant_is_refused(db: Store) -> None:
    fill(db, 1)
    with pytest.raises(FirstmateError, match="no supervision grant") as err:
        drain(db, "branch")
    assert err.value.exit_code == ExitCode.FAILED
    with pytest.raises(FirstmateError, match="no supervision grant"):
        ack(db, "branch", 1, "g.1.x")


def test_branch_drain_of_an_empty_grant_explains_why(db: Store, owner: subprocess.Popen[bytes]) -> None:
    fill(db, 1)
    grants.activate(db, owner.pid, GEN)
    with pytest.raises(FirstmateError, match="no published rows"):
        drain(db, "branch")
    grants.publish(db, GEN, [1])
    gen = drain(db, "branch").generation
    assert gen is not None
    ack(db, "branch", 1, gen)
    with pytest.raises(FirstmateError, match="already consumed"):
        drain(db, "branch")


def test_pending_counts_per_actor(db: Store, fm_home: Home, owner: subprocess.Popen[bytes]) -> None:
    fill(db, 3)
    insert_row(fm_home, 50, kind="bogus")
    grants.activate(db, owner.pid, GEN)
    grants.publish(db, GEN, [2])
    with db.reading() as conn:
        assert queuestatus.pending_count(conn, "branch") == 1
        assert queuestatus.pending_count(conn, "main") == 3  # rows 1, 3 and the unusable one
    finish(owner)
    with db.reading() as conn:
        assert queuestatus.pending_count(conn, "branch") == 0
        assert queuestatus.pending_count(conn, "main") == 4  # a gone owner's rows count for main


def test_rows_above_a_main_cutoff_stay_grantable(db: Store, fm_home: Home, owner: subprocess.Popen[bytes]) -> None:
    fill(db, 1)
    main = drain(db, "main")
    late = queue.append(db, "signal", "late", "after presentation")
    assert main.generation is not None
    ack(db, "main", 1, main.generation)
    grants.activate(db, owner.pid, GEN)
    assert grants.publish(db, GEN, [late]) == (late,)


def test_withhold_surfaces_unclaimed_rows_to_main_once(db: Store, owner: subprocess.Popen[bytes]) -> None:
    fill(db, 2)
    with db.transaction() as conn:
        episodes.arm_check(conn, True)  # announced: nothing owed until something changes
    announced = episode(db)
    assert isinstance(announced, Episode) and announced.status == "announced"
    grants.activate(db, owner.pid, GEN)
    grants.publish(db, GEN, [1])  # row 2 is left for main: the episode reopens once
    reopened = episode(db)
    assert isinstance(reopened, Episode) and reopened.status == "pending"
    assert reopened.generation != announced.generation
    assert grants.withhold(db) is False  # nothing newly unclaimed: no second reopen
    assert episode(db) == reopened
    queue.append(db, "signal", "new", "x")
    assert grants.withhold(db) is True
