"""The wake queue under real concurrency: many processes, SIGKILL, held and orphaned locks."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest
from firstmate.store import drain, episodes, queue
from firstmate.store.database import last_seq
from firstmate.store.home import Home
from firstmate.store.locks import FileLock
from firstmate.testing import fm_command
from wakeq_support import (
    DEADLINE,
    child_env,
    claims,
    db_for,
    episode,
    finish,
    fm,
    python,
    raw,
    read_line,
    rows,
)

pytestmark = pytest.mark.slow

PRODUCERS = 8
APPENDS = 200

PRODUCER = """
import json, os, sys
from firstmate.store import queue
from firstmate.store.home import open_home
from firstmate.store.database import open_store
db = open_store(open_home(os.environ))
name, count = sys.argv[1], int(sys.argv[2])
seqs = [queue.append(db, "signal", f"{name}-{i}", f"payload {name} {i}") for i in range(count)]
print(json.dumps(seqs), flush=True)
"""

MAIN_CONSUMER = """
import json, os, sys
from firstmate.store import drain, queue
from firstmate.store.home import open_home
from firstmate.store.database import open_store
db = open_store(open_home(os.environ))
stop = sys.argv[1]
taken = []
print("ready", flush=True)
while True:
    stopping = os.path.exists(stop)
    result = drain.drain(db, "main", env={})
    if result.skipped:
        continue
    if result.rows:
        done = drain.acknowledge(db, "main", result.ack_through, result.generation, env={})
        if done.consumed != len(result.rows):
            sys.exit(f"main consumed {done.consumed} but was shown {len(result.rows)}")
        taken += [r.seq for r in result.rows]
    elif stopping and result.held is None:
        break
print(json.dumps(taken), flush=True)
"""

BRANCH_CONSUMER = """
import json, os, sys
from firstmate.store import drain, grants, queue
from firstmate.base.errors import ConflictError, FirstmateError
from firstmate.store.home import open_home
from firstmate.store.database import open_store
db = open_store(open_home(os.environ))
stop = sys.argv[1]
taken, conflicts, rounds = [], 0, 0
announced = False
while True:
    stopping = os.path.exists(stop)
    rounds += 1
    gen = f"br.{os.getpid()}.{rounds}"
    grants.activate(db, os.getpid(), gen)
    with db.reading() as conn:
        free = [r[0] for r in conn.execute(
            "SELECT seq FROM wakes WHERE claim IS NULL ORDER BY seq LIMIT 7")]
    if not free:
        grants.deactivate(db, os.getpid(), gen)
        if stopping:
            break
        continue
    try:
        grants.publish(db, gen, free)
    except ConflictError:
        conflicts += 1
        grants.deactivate(db, os.getpid(), gen)
        continue
    except FirstmateError:
        grants.deactivate(db, os.getpid(), gen)
        continue
    result = drain.drain(db, "branch", env={})
    if sorted(r.seq for r in result.rows) != sorted(free):
        sys.exit(f"branch was shown {[r.seq for r in result.rows]} for grant {free}")
    done = drain.acknowledge(db, "branch", result.ack_through, result.generation, env={})
    if done.consumed != len(free):
        sys.exit(f"branch consumed {done.consumed} of its {len(free)} granted rows")
    taken += free
    grants.deactivate(db, os.getpid(), gen)
    if not announced:
        print("got-rows", flush=True)
        announced = True
print(json.dumps({"taken": taken, "conflicts": conflicts}), flush=True)
"""


def output_json(proc: subprocess.Popen[bytes]) -> object:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode()
    return json.loads(out.decode().strip().splitlines()[-1])


def test_many_producers_with_concurrent_main_and_branch_consumers(
    fm_home: Home, procs: list[subprocess.Popen[bytes]]
) -> None:
    stop, stop_main = fm_home.root / "stop", fm_home.root / "stop-main"
    db = db_for(fm_home)
    seeded = [queue.append(db, "signal", f"seed-{i}", "seed") for i in range(20)]
    branch = python(BRANCH_CONSUMER, fm_home, str(stop))
    procs.append(branch)
    assert read_line(branch, 120) == "got-rows"  # the branch owns some rows before main starts
    main = python(MAIN_CONSUMER, fm_home, str(stop_main))
    procs.append(main)
    assert read_line(main, 120) == "ready"
    producers = [python(PRODUCER, fm_home, f"p{i}", str(APPENDS)) for i in range(PRODUCERS)]
    procs.extend(producers)
    appended = list(seeded)
    for proc in producers:
        seqs = output_json(proc)
        assert isinstance(seqs, list) and len(seqs) == APPENDS
        appended += seqs
    stop.write_text("stop\n")
    branch_out = output_json(branch)
    # Rows appended once the branch is gone are main's alone (under load the branch may have
    # won every race before): main provably takes part.
    tail = [queue.append(db, "signal", f"tail-{i}", "tail") for i in range(5)]
    appended += tail
    stop_main.write_text("stop\n")
    main_taken = output_json(main)
    assert isinstance(main_taken, list) and isinstance(branch_out, dict)
    branch_taken = branch_out["taken"]
    assert set(tail) <= set(main_taken)

    total = PRODUCERS * APPENDS + len(seeded) + len(tail)
    assert len(set(appended)) == total                     # every append got its own seq
    assert len(main_taken) == len(set(main_taken))         # main consumed nothing twice
    assert len(branch_taken) == len(set(branch_taken))     # the branch consumed nothing twice
    assert not set(main_taken) & set(branch_taken)         # no row consumed by both actors
    assert sorted(main_taken + branch_taken) == sorted(appended)  # no row lost
    assert branch_taken and main_taken
    assert rows(fm_home) == []


APPEND_ONE = """
import os, sys
from firstmate.store import queue
from firstmate.store.home import open_home
from firstmate.store.database import open_store
print(queue.append(open_store(open_home(os.environ)), "stale", sys.argv[1], "raced"), flush=True)
"""


def test_a_drain_racing_an_append_never_loses_or_double_presents_the_row(fm_home: Home) -> None:
    db = db_for(fm_home)
    presented: list[int] = []
    appended: list[int] = []
    for n in range(15):
        # A key of its own: rows of one key collapse into the newest when drained together,
        # which would hide a row this test must see presented.
        proc = python(APPEND_ONE, fm_home, f"race{n}")
        try:
            result = drain.drain(db, "main", env={})
            seq = int(read_line(proc, DEADLINE))
        finally:
            finish(proc)
        appended.append(seq)
        if result.rows:
            assert result.ack_through is not None and result.generation is not None
            drain.acknowledge(db, "main", result.ack_through, result.generation, env={})
            presented += [r.seq for r in result.rows]
        # Either this drain showed (and we consumed) the row, or it is still queued, unowned.
        assert (seq in presented) != (claims(fm_home).get(seq, "absent") is None)
    final = drain.drain(db, "main", env={})
    presented += [r.seq for r in final.rows]
    assert sorted(presented) == sorted(appended)


WEDGED_WRITER = """
import os, sys
from firstmate.store import episodes, queue
from firstmate.store.home import open_home
from firstmate.store.database import open_store
db = open_store(open_home(os.environ))
count = int(sys.argv[1])
with queue.locked(db) as conn:
    for i in range(count):
        queue.append_locked(conn, "signal", f"doomed-{i}", "x" * 200)
    episodes.publish_handling(conn)
    print("ready", flush=True)
    sys.stdin.read()
"""


@pytest.mark.parametrize("count", [1, 20_000])
def test_a_writer_killed_mid_transaction_leaves_nothing_behind(fm_home: Home, count: int) -> None:
    db = db_for(fm_home)
    kept = queue.append(db, "signal", "kept", "committed before")
    before_rows, before_episode = rows(fm_home), episode(db)
    proc = python(WEDGED_WRITER, fm_home, str(count))
    try:
        assert read_line(proc, 120) == "ready"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=DEADLINE)
    finally:
        finish(proc)
    assert proc.returncode == -signal.SIGKILL
    with raw(fm_home) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert last_seq(conn) == kept
    assert rows(fm_home) == before_rows
    assert episode(db) == before_episode
    # The lock and the write lock died with the writer: the next append proceeds at once.
    assert queue.append(db, "signal", "next", "after the crash") == kept + 1


LOOPING_PRODUCER = """
import os
from firstmate.store import queue
from firstmate.store.home import open_home
from firstmate.store.database import open_store
db = open_store(open_home(os.environ))
i = 0
while True:
    print(queue.append(db, "signal", f"loop-{i}", "payload"), flush=True)
    i += 1
"""


def test_sigkill_at_arbitrary_instants_keeps_every_confirmed_append(fm_home: Home) -> None:
    db = db_for(fm_home)
    confirmed: list[int] = []
    for round_no in range(6):
        proc = python(LOOPING_PRODUCER, fm_home)
        try:
            for _ in range(3 + round_no * 7):
                confirmed.append(int(read_line(proc, DEADLINE)))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=DEADLINE)
        finally:
            finish(proc)
    stored = [int(str(r[0])) for r in rows(fm_home)]
    assert set(confirmed) <= set(stored)
    assert stored == list(range(1, len(stored) + 1))  # whole steps only: no gaps, no duplicates
    with raw(fm_home) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert isinstance(episode(db), episodes.Episode)
    result = drain.drain(db, "main", env={})
    assert result.ack_through == stored[-1] and result.generation is not None
    assert drain.acknowledge(db, "main", stored[-1], result.generation, env={}).consumed == len(stored)


HOLDER = """
import os, sys
from firstmate.store import queue
from firstmate.store.home import open_home
from firstmate.store.database import open_store
db = open_store(open_home(os.environ))
with queue.locked(db):
    print("ready", os.getpid(), flush=True)
    sys.stdin.read()
print("released", flush=True)
"""


def hold_queue(home: Home) -> subprocess.Popen[bytes]:
    proc = python(HOLDER, home)
    assert read_line(proc, 120) == f"ready {proc.pid}"
    return proc


def test_waiters_proceed_when_the_queue_lock_holder_is_killed(fm_home: Home) -> None:
    holder = hold_queue(fm_home)
    waiters: list[subprocess.Popen[bytes]] = []
    try:
        lock = FileLock(fm_home.lock_path("queue"), "queue", fm_home.root)
        record = lock.holder()
        assert record is not None and record.pid == holder.pid and record.verified
        waiters = [python(APPEND_ONE, fm_home, f"waiter{i}") for i in range(3)]
        assert all(w.poll() is None for w in waiters)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=DEADLINE)
        seqs = sorted(int(read_line(w, 60)) for w in waiters)
    finally:
        for proc in (holder, *waiters):
            finish(proc)
    assert seqs == [1, 2, 3]
    assert [r[0] for r in rows(fm_home)] == [1, 2, 3]


def test_drain_skips_while_a_live_process_holds_the_queue_lock_and_ack_waits(fm_home: Home) -> None:
    db = db_for(fm_home)
    queue.append(db, "signal", "a", "held back")
    assert drain.drain(db, "main", env={}).ack_through == 1  # presented: now it can be acknowledged
    state = episode(db)
    assert isinstance(state, episodes.Episode)
    holder = hold_queue(fm_home)
    acker: subprocess.Popen[bytes] | None = None
    try:
        out = fm(fm_home, "wake", "drain", FM_STATUS_PRESENTATION_LOCK_TIMEOUT="1")
        assert out.returncode == 0
        assert out.stdout == (
            f"WAKE DRAIN SKIPPED: queue lock remains held by live pid {holder.pid} after 1s; "
            "retry on the next drain.\n"
        )
        assert out.stderr == ""
        assert claims(fm_home) == {1: "main"} and episode(db) == state  # nothing changed
        as_json = fm(fm_home, "wake", "drain", "--json", FM_STATUS_PRESENTATION_LOCK_TIMEOUT="1")
        assert json.loads(as_json.stdout)["skipped"].startswith("WAKE DRAIN SKIPPED: ")
        # An acknowledgement is not bounded: it waits for the holder, however long.
        acker = subprocess.Popen(
            fm_command("wake", "drain", "--ack-through", "1", "--recovery-generation", state.generation),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=child_env(fm_home, FM_STATUS_PRESENTATION_LOCK_TIMEOUT="1"),
        )
        with pytest.raises(subprocess.TimeoutExpired):  # well past the presentation bound
            acker.wait(timeout=2.5)
        assert rows(fm_home) != []
        assert holder.stdin is not None
        holder.stdin.close()
        assert read_line(holder) == "released"
        assert acker.wait(timeout=DEADLINE) == 0
    finally:
        finish(holder)
        if acker is not None:
            finish(acker)
    assert rows(fm_home) == []
    after = episode(db)
    assert isinstance(after, episodes.Episode) and after.status == "acked"
