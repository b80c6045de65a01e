"""Group commit (firstmate.fast.appendspool): producers that wait for the queue lock have their
rows committed by whoever holds it next, exactly once, whoever dies when."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.base.errors import StateError
from firstmate.fast import appendpath, appendspool
from firstmate.store.database import open_store
from firstmate.store.home import Home
from firstmate.store.locks import FileLock
from firstmate.testing.procs import eventually
from wakeq_support import DEADLINE, child_env, finish, raw, rows

pytestmark = pytest.mark.slow


def spooled(home: Home) -> list[str]:
    folder = Path(appendspool.spool_dir(home.state))
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else []


def riding(home: Home) -> int:
    """How many whole rows ride the announcement now under the name ``.commit``."""
    try:
        data = (Path(appendspool.spool_dir(home.state)) / appendspool.NOTE).read_bytes()
    except FileNotFoundError:
        return 0
    return sum(1 for record in data.split(b"\x01")[1:] if b"\x00\x00" in record)


def rider(home: Home) -> int:
    """The announcement under the name ``.commit``, opened as a follower opens it to ride it."""
    return os.open(Path(appendspool.spool_dir(home.state)) / appendspool.NOTE,
                   os.O_RDWR | os.O_APPEND)


def legacy_spool(home: Home, key: str, content: bytes | None = None) -> str:
    """A row spooled as a file, as an earlier version's follower wrote it: its id."""
    folder = Path(appendspool.spool_dir(home.state))
    folder.mkdir(mode=0o700, exist_ok=True)
    ident = appendspool.new_ident()
    if content is None:
        content = f"{time.time()!r}\x00check\x00{key}\x00check: {key}\x00\x00".encode()
    (folder / ident).write_bytes(content)
    return ident


def markers(home: Home, prefix: str = appendspool.RIDER) -> dict[str, int]:
    with raw(home) as conn:
        return {str(k)[len(prefix):]: int(v) for k, v in conn.execute(
            "SELECT key, value FROM kv WHERE substr(key, 1, ?) = ?", (len(prefix), prefix))}


def append_cli(home: Home, key: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "firstmate", "wake", "append", "check", key,
                           f"check: {key}"], capture_output=True, text=True, env=child_env(home),
                          timeout=DEADLINE, check=False)


def producer(home: Home, key: str) -> subprocess.Popen[str]:
    """``fm wake append`` exactly as a crew or a hook runs it."""
    return subprocess.Popen([sys.executable, "-m", "firstmate", "wake", "append", "check", key,
                             f"check: {key}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=child_env(home))


@pytest.fixture
def queue_lock(fm_home: Home) -> Iterator[FileLock]:
    open_store(fm_home).close()  # the database exists: appends take the fast path
    lock = FileLock(fm_home.lock_path("queue"), role="queue", home=fm_home.root)
    lock.acquire(DEADLINE)
    try:
        yield lock
    finally:
        if lock.held:
            lock.release()


def commit_as_holder(home: Home, key: str, served: list[tuple[str, int]] | None = None,
                     note: int = -1) -> int:
    """Commit every row that rode *note* (when given), every spooled file and one row of our
    own, as a leader does (the caller holds the locks it wants held); *served* gets what the
    announcement would list."""
    db = open_store(home)
    try:
        return appendpath.commit_locked(db.connection(), db.path, home.state,
                                        (time.time(), "check", key, f"check: {key}"),
                                        served=served, note=note)
    finally:
        db.close()


def test_waiting_producers_are_served_by_the_next_commit_without_taking_the_lock(
    fm_home: Home, queue_lock: FileLock
) -> None:
    # We lead as a producer leads: the gate, and an announcement the followers sleep on.
    gate = appendspool.committing(fm_home.state)
    gate.__enter__()
    procs = [producer(fm_home, f"waiter-{i}") for i in range(3)]
    try:
        eventually("the condition", lambda: riding(fm_home) == 3)
        served: list[tuple[str, int]] = []
        own = commit_as_holder(fm_home, "holder", served, gate.note)
        appendspool.publish(gate.note, served)
        gate.__exit__(None, None, None)
        # The queue lock is still ours: each waiter learns its number from the announcement.
        outs = [p.communicate(timeout=DEADLINE) for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], outs
        assert queue_lock.held
    finally:
        for p in procs:
            finish(p)
    got = {f"waiter-{i}": int(out.strip()) for i, (out, _) in enumerate(outs)}
    table = {key: seq for seq, _kind, key, _payload, _claim in rows(fm_home)}
    assert table == {**got, "holder": own}  # every row once, at the number its producer was told
    assert own == max(table.values())  # the riding rows went in first, in the order they came
    # The announcement named each riding row (its id carries its producer's pid) once.
    assert sorted((int(ident.split("-")[1]), seq) for ident, seq in served) == sorted(
        (p.pid, got[f"waiter-{i}"]) for i, p in enumerate(procs))
    assert spooled(fm_home) == []  # no file was made for any row
    assert set(markers(fm_home)) == {ident for ident, _seq in served}


def test_following_a_commit_in_progress_needs_no_gate(fm_home: Home, queue_lock: FileLock) -> None:
    leading = appendspool.committing(fm_home.state)
    leading.__enter__()
    # The gate only decides who leads next: held here all along, it must not stop a follower.
    gate = appendspool.open_gate(fm_home.state)
    fcntl.flock(gate, fcntl.LOCK_EX)
    proc = producer(fm_home, "follower")
    try:
        eventually("the condition", lambda: riding(fm_home) == 1)
        served: list[tuple[str, int]] = []
        own = commit_as_holder(fm_home, "leader", served, leading.note)
        appendspool.publish(leading.note, served)
        leading.__exit__(None, None, None)
        out, err = proc.communicate(timeout=DEADLINE)
        assert proc.returncode == 0, err
    finally:
        os.close(gate)
        finish(proc)
    table = {key: seq for seq, _kind, key, _payload, _claim in rows(fm_home)}
    assert table == {"follower": int(out), "leader": own}


def test_a_follower_that_slept_through_the_commit_of_its_row_learns_it_from_the_next(
    fm_home: Home, queue_lock: FileLock
) -> None:
    gate = appendspool.committing(fm_home.state)
    gate.__enter__()
    proc = producer(fm_home, "sleepy")
    second = -1
    try:
        eventually("the condition", lambda: riding(fm_home) == 1)
        first = gate.note
        took: list[tuple[str, int]] = []
        commit_as_holder(fm_home, "first", took, first)  # takes the row; its list is never written
        # The next commit is announced before the first one ends: woken without its number, the
        # follower rides it again, and the second commit names the row instead of inserting it.
        second = appendspool.announce(fm_home.state)
        os.close(first)
        eventually("the condition", lambda: riding(fm_home) == 1)
        served: list[tuple[str, int]] = []
        commit_as_holder(fm_home, "second", served, second)
        appendspool.publish(second, served)
        os.close(second)
        out, err = proc.communicate(timeout=DEADLINE)
        assert proc.returncode == 0, err
    finally:
        finish(proc)
    assert served == took  # the second commit inserted nothing twice and named the row
    assert int(out) == took[0][1]
    # The follower never led (a leader announces itself under the name; the second commit
    # took its own announcement off it).
    assert not (Path(appendspool.spool_dir(fm_home.state)) / appendspool.NOTE).exists()
    table = {key: seq for seq, _kind, key, _payload, _claim in rows(fm_home)}
    assert table == {"sleepy": int(out), "first": int(out) + 1, "second": int(out) + 2}
    assert spooled(fm_home) == []


def test_a_follower_whose_row_was_committed_before_it_led_does_not_commit_it_again(
    fm_home: Home, queue_lock: FileLock
) -> None:
    # A leader killed after its commit and before writing its list: the follower wakes without
    # its number, leads, and must find its row's marker.
    gate = appendspool.committing(fm_home.state)
    gate.__enter__()
    proc = producer(fm_home, "late")
    try:
        eventually("the condition", lambda: riding(fm_home) == 1)
        holder = commit_as_holder(fm_home, "holder", note=gate.note)
        gate.__exit__(None, None, None)
        # It now leads, and reads its marker once no commit can be in flight: with the queue lock.
        queue_lock.release()
        out, err = proc.communicate(timeout=DEADLINE)
        assert proc.returncode == 0, err
    finally:
        finish(proc)
    table = {key: seq for seq, _kind, key, _payload, _claim in rows(fm_home)}
    assert table == {"late": int(out), "holder": holder}  # not inserted a second time
    assert list(markers(fm_home).values()) == [int(out)] and spooled(fm_home) == []


def test_markers_of_rows_that_rode_are_deleted_once_abandoned(fm_home: Home) -> None:
    open_store(fm_home).close()
    old = f"{time.time_ns() - int((appendspool.ABANDONED_SECONDS + 5) * 1e9):020d}-1-old"
    young = f"{time.time_ns() - int(1e9):020d}-1-young"
    with raw(fm_home) as conn:
        conn.executemany("INSERT INTO kv (key, value) VALUES (?, ?)",
                         [(appendspool.RIDER + old, "7"), (appendspool.RIDER + young, "8")])
    lead = appendspool.committing(fm_home.state)
    lead.__enter__()
    try:
        commit_as_holder(fm_home, "tidy", note=lead.note)
    finally:
        lead.__exit__(None, None, None)
    assert markers(fm_home) == {young: 8}  # a producer may still come for the young one


def leading(home: Home) -> bool:
    """Some producer holds the current announcement: it leads a commit."""
    try:
        fd = os.open(Path(appendspool.spool_dir(home.state)) / appendspool.NOTE, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_leader_reads_its_marker_only_once_the_commit_before_it_has_ended(
    fm_home: Home, queue_lock: FileLock
) -> None:
    # A follower that rode an announcement cannot tell whether its leader read the row: it may
    # lead the next commit while the one before is taking its row right then.
    ending = appendspool.committing(fm_home.state)
    ending.__enter__()
    # What the commit before reads once the follower leads (opened anew: a dup would share the
    # announcement's lock and keep the follower asleep).
    kept = os.open(Path(appendspool.spool_dir(fm_home.state)) / appendspool.NOTE, os.O_RDONLY)
    proc = producer(fm_home, "early")
    try:
        eventually("the condition", lambda: riding(fm_home) == 1)
        ending.__exit__(None, None, None)  # (nothing listed, nothing read yet: it leads next)
        eventually("the condition", lambda: leading(fm_home))
        holder = commit_as_holder(fm_home, "holder", note=kept)  # takes the row, holding the lock
        assert leading(fm_home)  # (the follower's own announcement was not taken off the name)
        queue_lock.release()
        out, err = proc.communicate(timeout=DEADLINE)
        assert proc.returncode == 0, err
    finally:
        os.close(kept)
        finish(proc)
    table = {key: seq for seq, _kind, key, _payload, _claim in rows(fm_home)}
    assert table == {"early": int(out), "holder": holder}  # once, at the number it was told
    assert len(rows(fm_home)) == 2 and spooled(fm_home) == []


def test_a_commit_withdraws_its_announcement_before_it_reads_the_riders(fm_home: Home) -> None:
    open_store(fm_home).close()
    note = Path(appendspool.spool_dir(fm_home.state)) / appendspool.NOTE
    lead = appendspool.committing(fm_home.state)
    lead.__enter__()
    try:
        theirs = rider(fm_home)
        try:
            # In time: the name is still this announcement's once the row is in it.
            assert appendspool.ride(fm_home.state, theirs, (time.time(), "check", "a", "check: a"),
                                    appendspool.new_ident())
            served: list[tuple[str, int]] = []
            own = commit_as_holder(fm_home, "leader", served, lead.note)
            assert not note.exists() and not leading(fm_home)  # the next producer leads
            # Late: written after the leader read it. The producer is told so, and goes again.
            late = appendspool.new_ident()
            assert not appendspool.ride(fm_home.state, theirs,
                                        (time.time(), "check", "b", "check: b"), late)
        finally:
            os.close(theirs)
    finally:
        lead.__exit__(None, None, None)
    assert [k for _s, _k, k, _p, _c in rows(fm_home)] == ["a", "leader"]
    assert own == rows(fm_home)[-1][0] and len(served) == 1


def test_a_row_that_rode_two_announcements_is_inserted_once_and_named_by_both(
    fm_home: Home
) -> None:
    open_store(fm_home).close()
    ident = appendspool.new_ident()
    row = (time.time(), "check", "twice", "check: twice")
    told: list[list[tuple[str, int]]] = []
    for name in ("first", "second"):
        lead = appendspool.committing(fm_home.state)
        lead.__enter__()
        try:
            theirs = rider(fm_home)
            try:
                assert appendspool.ride(fm_home.state, theirs, row, ident)
            finally:
                os.close(theirs)
            served: list[tuple[str, int]] = []
            commit_as_holder(fm_home, name, served, lead.note)
            appendspool.publish(lead.note, served)
            told.append(served)
        finally:
            lead.__exit__(None, None, None)
    assert [k for _s, _k, k, _p, _c in rows(fm_home)] == ["twice", "first", "second"]
    assert told[0] == told[1] == [(ident, rows(fm_home)[0][0])]


@pytest.mark.parametrize("record", [b"\x01garbage\x00\x00", b"\x01id\x001.0\x00nosuchkind\x00k\x00p\x00\x00",
                                    b"\x01id\x001.0\x00check\x00\x00p\x00\x00",
                                    b"\x01id\x00\xff\xfe\x00check\x00k\x00p\x00\x00",
                                    b"\x01\xffid\x001.0\x00check\x00k\x00p\x00\x00"])
def test_a_riding_record_that_is_not_a_row_is_set_aside_and_one_cut_short_passed_over(
    fm_home: Home, record: bytes
) -> None:
    open_store(fm_home).close()
    lead = appendspool.committing(fm_home.state)
    lead.__enter__()
    try:
        theirs = rider(fm_home)
        try:
            os.write(theirs, record + b"\x01cut-short\x001.0\x00check\x00k")
            assert appendspool.ride(fm_home.state, theirs,
                                    (time.time(), "check", "real", "check: real"),
                                    appendspool.new_ident())
        finally:
            os.close(theirs)
        commit_as_holder(fm_home, "leader", note=lead.note)
    finally:
        lead.__exit__(None, None, None)
    assert [k for _s, _k, k, _p, _c in rows(fm_home)] == ["real", "leader"]
    with raw(fm_home) as conn:
        kept = [r for (r,) in conn.execute("SELECT record FROM set_aside WHERE what = 'riding row'")]
    assert len(kept) == 1 and "cut-short" not in kept[0]


def test_a_spooled_row_whose_producer_died_is_committed_once_then_cleared(fm_home: Home) -> None:
    open_store(fm_home).close()
    # A producer of an earlier version, killed while waiting, leaves its request behind as a
    # file: the next commit takes it.
    ident = legacy_spool(fm_home, "orphan")
    commit_as_holder(fm_home, "first")
    commit_as_holder(fm_home, "second")  # the marker keeps the orphan from a second insert
    keys = [key for _seq, _kind, key, _payload, _claim in rows(fm_home)]
    assert keys == ["orphan", "first", "second"]
    assert spooled(fm_home) == [ident] and ident in markers(fm_home, appendspool.MARKER)
    old = time.time() - appendspool.ABANDONED_SECONDS - 5
    os.utime(Path(appendspool.spool_dir(fm_home.state)) / ident, (old, old))
    commit_as_holder(fm_home, "third")
    assert spooled(fm_home) == [] and markers(fm_home, appendspool.MARKER) == {}
    assert [k for _s, _k, k, _p, _c in rows(fm_home)].count("orphan") == 1


def test_temporary_files_of_killed_writers_are_removed_once_abandoned(fm_home: Home) -> None:
    open_store(fm_home).close()
    folder = Path(appendspool.spool_dir(fm_home.state))
    folder.mkdir(mode=0o700, exist_ok=True)
    old = time.time() - appendspool.ABANDONED_SECONDS - 5
    for name in (".commit-1-dead.tmp", ".0001-1-dead.tmp", ".commit-2-young.tmp"):
        (folder / name).write_bytes(b"x")
    for name in (".commit-1-dead.tmp", ".0001-1-dead.tmp"):
        os.utime(folder / name, (old, old))
    commit_as_holder(fm_home, "tidy")
    assert sorted(p.name for p in folder.glob(".*.tmp")) == [".commit-2-young.tmp"]


LEADER = """
import sys
from firstmate.fast import appendspool
with appendspool.committing(sys.argv[1]):
    print("leading", flush=True)
    sys.stdin.readline()  # killed here, in the middle of its commit
"""


def test_followers_of_a_leader_killed_mid_commit_commit_their_rows_once(fm_home: Home) -> None:
    open_store(fm_home).close()
    leader = subprocess.Popen([sys.executable, "-c", LEADER, str(fm_home.state)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=child_env(fm_home))
    procs: list[subprocess.Popen[str]] = []
    try:
        assert leader.stdout is not None and leader.stdout.readline().strip() == "leading"
        procs = [producer(fm_home, f"orphaned-{i}") for i in range(4)]
        eventually("the condition", lambda: riding(fm_home) == 4)  # each rides the leader's commit
        leader.kill()
        leader.wait(timeout=DEADLINE)
        outs = [p.communicate(timeout=DEADLINE) for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, outs
    finally:
        finish(leader)
        for p in procs:
            finish(p)
    table = {key: seq for seq, _kind, key, _payload, _claim in rows(fm_home)}
    assert table == {f"orphaned-{i}": int(out) for i, (out, _) in enumerate(outs)}
    assert len(rows(fm_home)) == 4 and spooled(fm_home) == []


@pytest.mark.parametrize("content", [b"garbage", b"1.0\x00nosuchkind\x00k\x00p",
                                     b"1.0\x00check\x00\x00p", b"\xff\xfe\x00check\x00k\x00p",
                                     b"1.0\x00check\x00k\x1b[31m\x00p"])
def test_a_spool_file_that_is_not_a_row_is_set_aside_never_inserted(
    fm_home: Home, content: bytes
) -> None:
    open_store(fm_home).close()
    folder = Path(appendspool.spool_dir(fm_home.state))
    folder.mkdir(mode=0o700, exist_ok=True)
    (folder / "00000000000000000001-1-planted").write_bytes(content + b"\x00\x00")  # ended
    commit_as_holder(fm_home, "real")
    assert [k for _s, _k, k, _p, _c in rows(fm_home)] == ["real"]
    assert spooled(fm_home) == []
    with raw(fm_home) as conn:
        kept = [r for (r,) in conn.execute("SELECT record FROM set_aside WHERE what = 'spooled row'")]
    assert len(kept) == 1 and kept[0].startswith("00000000000000000001-1-planted\t")


def test_a_spool_file_without_its_end_mark_waits_until_abandoned_then_is_set_aside(
    fm_home: Home
) -> None:
    # A row still being written, or whose writer was killed mid-write (here: cut short).
    open_store(fm_home).close()
    whole = legacy_spool(fm_home, "cut")
    path = Path(appendspool.spool_dir(fm_home.state)) / whole
    path.write_bytes(path.read_bytes()[:-3])
    commit_as_holder(fm_home, "first")
    assert [k for _s, _k, k, _p, _c in rows(fm_home)] == ["first"]
    assert spooled(fm_home) == [whole] and markers(fm_home, appendspool.MARKER) == {}  # left for later
    old = time.time() - appendspool.ABANDONED_SECONDS - 5
    os.utime(path, (old, old))
    commit_as_holder(fm_home, "second")
    assert [k for _s, _k, k, _p, _c in rows(fm_home)] == ["first", "second"]
    assert spooled(fm_home) == []
    with raw(fm_home) as conn:
        kept = [r for (r,) in conn.execute("SELECT record FROM set_aside WHERE what = 'spooled row'")]
    assert len(kept) == 1 and kept[0].startswith(f"{whole}\t")


def test_a_symlink_in_the_spool_is_never_followed(fm_home: Home, tmp_path: Path) -> None:
    open_store(fm_home).close()
    outside = tmp_path / "outside"
    outside.write_bytes(b"1.0\x00check\x00stolen\x00check: stolen")
    folder = Path(appendspool.spool_dir(fm_home.state))
    folder.mkdir(mode=0o700, exist_ok=True)
    (folder / "00000000000000000001-1-link").symlink_to(outside)
    commit_as_holder(fm_home, "real")
    assert [k for _s, _k, k, _p, _c in rows(fm_home)] == ["real"]
    assert outside.exists()  # the link was removed, not what it points at


def test_a_symlinked_spool_directory_is_refused_with_one_line(fm_home: Home, tmp_path: Path) -> None:
    open_store(fm_home).close()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "00000000000000000001-1-x").write_bytes(b"1.0\x00check\x00k\x00check: k")
    Path(appendspool.spool_dir(fm_home.state)).symlink_to(elsewhere)
    with pytest.raises(StateError, match="refusing symlinked state path"):
        commit_as_holder(fm_home, "real")
    done = append_cli(fm_home, "k")
    assert done.returncode == 4 and done.stderr.count("\n") == 1, done.stderr
    assert rows(fm_home) == []
    (elsewhere / ".gate").write_bytes(b"")  # even a gate found there is never used
    again = append_cli(fm_home, "k")
    assert again.returncode == 4 and "refusing symlinked state path" in again.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == [".gate", "00000000000000000001-1-x"]


@pytest.mark.parametrize("name", [appendspool.GATE, appendspool.NOTE])
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_planted_gate_or_announcement_is_refused_with_one_line_never_waited_on(
    fm_home: Home, name: str, kind: str
) -> None:
    open_store(fm_home).close()
    folder = Path(appendspool.spool_dir(fm_home.state))
    folder.mkdir(mode=0o700, exist_ok=True)
    planted = folder / name
    if kind == "fifo":
        os.mkfifo(planted)  # an open that waits for a writer would hang every append
    else:
        planted.mkdir()
    done = append_cli(fm_home, "k")  # (the timeout is the hang check)
    assert done.returncode == 4 and done.stderr.count("\n") == 1, done.stderr
    assert f"{planted} " in done.stderr and "remove it and let fm recreate it" in done.stderr
    assert rows(fm_home) == []
    if kind == "fifo":
        planted.unlink()
    else:
        planted.rmdir()
    assert append_cli(fm_home, "k").returncode == 0  # the fix the line names works
    assert [k for _s, _k, k, _p, _c in rows(fm_home)] == ["k"]


def test_a_fifo_in_the_spool_is_set_aside_never_waited_on_and_a_directory_passed_over(fm_home: Home) -> None:
    open_store(fm_home).close()
    folder = Path(appendspool.spool_dir(fm_home.state))
    folder.mkdir(mode=0o700, exist_ok=True)
    os.mkfifo(folder / "00000000000000000001-1-fifo")
    (folder / "00000000000000000002-1-dir").mkdir()
    commit_as_holder(fm_home, "real")
    commit_as_holder(fm_home, "again")
    assert [k for _s, _k, k, _p, _c in rows(fm_home)] == ["real", "again"]
    assert spooled(fm_home) == ["00000000000000000002-1-dir"]  # a directory is passed over
    with raw(fm_home) as conn:
        kept = [r for (r,) in conn.execute("SELECT record FROM set_aside WHERE what = 'spooled row'")]
    assert kept == ["00000000000000000001-1-fifo\t"]  # once, then gone


WORKER = """
import json, sys
from firstmate.fast import appendpath
from firstmate.testing.procs import eventually
def fallback(*a):
    raise SystemExit("the fast path was not taken")
name, count = sys.argv[1], int(sys.argv[2])
print(json.dumps([appendpath.append("signal", f"{name}-{i}", f"signal: {name} {i}",
                                    fallback=fallback) for i in range(count)]), flush=True)
"""


def test_many_producers_each_get_the_number_of_their_own_row(fm_home: Home) -> None:
    open_store(fm_home).close()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, f"p{i}", "60"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=child_env(fm_home))
             for i in range(12)]
    told: dict[str, int] = {}
    for i, proc in enumerate(procs):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        told.update({f"p{i}-{n}": seq for n, seq in enumerate(json.loads(out))})
    table = {key: seq for seq, _kind, key, _payload, _claim in rows(fm_home)}
    assert len(table) == len(rows(fm_home)) == 12 * 60  # no row twice
    assert table == told
    assert spooled(fm_home) == []


def test_an_uncontended_append_leads_without_announcing_and_changes_no_directory(
    fm_home: Home
) -> None:
    open_store(fm_home).close()
    assert append_cli(fm_home, "first").returncode == 0  # (makes the spool and its gate)
    folder = Path(appendspool.spool_dir(fm_home.state))
    before = os.stat(folder).st_mtime_ns
    time.sleep(0.05)  # past the file system's timestamp granularity, so a change would show
    assert append_cli(fm_home, "second").returncode == 0
    # No announcement was created, renamed or removed: the commit's fsync carries no directory
    # change of the spool's.
    assert os.stat(folder).st_mtime_ns == before
    assert [k for _s, _k, k, _p, _c in rows(fm_home)] == ["first", "second"]


def test_leading_at_once_takes_the_free_queue_lock_only_with_no_commit_in_progress(
    fm_home: Home
) -> None:
    open_store(fm_home).close()
    lock_path = fm_home.lock_path("queue")
    fd = appendspool.lead_at_once(fm_home.state, lock_path)
    assert fd >= 0
    try:
        # The queue lock is held (by that descriptor), so nobody else leads at once.
        assert appendspool.lead_at_once(fm_home.state, lock_path) == -1
    finally:
        os.close(fd)
    lead = appendspool.committing(fm_home.state)
    lead.__enter__()  # an announced commit in progress: its followers ride it instead
    try:
        assert appendspool.lead_at_once(fm_home.state, lock_path) == -1
    finally:
        lead.__exit__(None, None, None)


def test_producers_that_come_while_an_unannounced_commit_runs_go_in_together_next(
    fm_home: Home
) -> None:
    open_store(fm_home).close()
    # An uncontended leader mid-commit: the queue lock held, nothing announced.
    held = appendspool.lead_at_once(fm_home.state, fm_home.lock_path("queue"))
    assert held >= 0
    procs: list[subprocess.Popen[str]] = []
    try:
        procs.append(producer(fm_home, "next-leader"))
        eventually("the condition", lambda: leading(fm_home))  # it announced the next commit and waits for the lock
        procs += [producer(fm_home, f"rider-{i}") for i in range(2)]
        eventually("the condition", lambda: riding(fm_home) == 2)
        os.close(held)
        outs = [p.communicate(timeout=DEADLINE) for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], outs
    finally:
        for p in procs:
            finish(p)
    table = {key: seq for seq, _kind, key, _payload, _claim in rows(fm_home)}
    assert table == {"next-leader": int(outs[0][0]), "rider-0": int(outs[1][0]),
                     "rider-1": int(outs[2][0])}
    assert len(markers(fm_home)) == 2  # the riders went in with the next leader's commit


def test_an_uncontended_append_deletes_abandoned_markers_too(fm_home: Home) -> None:
    open_store(fm_home).close()
    old = f"{time.time_ns() - int((appendspool.ABANDONED_SECONDS + 5) * 1e9):020d}-1-old"
    young = f"{time.time_ns() - int(1e9):020d}-1-young"
    with raw(fm_home) as conn:
        conn.executemany("INSERT INTO kv (key, value) VALUES (?, ?)",
                         [(appendspool.RIDER + old, "7"), (appendspool.RIDER + young, "8"),
                          (appendspool.LED + old, "9")])
    assert append_cli(fm_home, "tidy").returncode == 0  # (nothing in progress: unannounced)
    assert markers(fm_home) == {young: 8}
    assert old not in markers(fm_home, appendspool.LED)


def test_a_row_that_rode_a_commit_is_left_in_doubt_when_its_own_tries_fail(
        fm_home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    # A follower that could not hear back from the commit it rode leads with its row's id; the
    # commit it rode took the row. When every one of its own tries then fails before it could
    # read its marker, the row may be queued: it must never say "not written" (a retry would
    # queue it twice), and the same append run again is queued once.
    import sqlite3

    from firstmate.base import dbconn
    from firstmate.fast import appenddoubt

    ident = appendspool.new_ident()
    own = (time.time(), "check", "rode", "check: rode")
    os.mkdir(appendspool.spool_dir(fm_home.state), 0o700)  # (where it rode)
    db = open_store(fm_home)
    try:
        appendpath.commit_locked(db.connection(), db.path, fm_home.state, own, ident)
        tries: list[int] = []

        def failing(*_args: object, **_kwargs: object) -> object:
            tries.append(1)
            cause = sqlite3.OperationalError("disk I/O error")
            cause.sqlite_errorname = "SQLITE_IOERR"  # type: ignore[attr-defined]
            raise dbconn.translate(db.path, cause) from cause

        monkeypatch.setattr(appendpath, "_transact", failing)
        with pytest.raises(StateError) as caught:
            appendpath.commit_locked(db.connection(), db.path, fm_home.state, own, ident)
    finally:
        db.close()
    assert len(tries) == appendpath.ATTEMPTS
    assert "may or may not be queued" in str(caught.value)
    assert "rode another append's commit" in str(caught.value)
    assert [entry[0] for entry in appenddoubt.read(fm_home.state) or []] == [ident]
    monkeypatch.undo()
    done = append_cli(fm_home, "rode")
    assert done.returncode == 0, done.stderr
    assert [key for _seq, _kind, key, _payload, _claim in rows(fm_home)] == ["rode"]
