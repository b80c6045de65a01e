"""Hostile state: symlinks, unwritable and full state directories, a home removed mid-cycle and
corrupt databases.

Every case must end in one line (stderr for ``fm: …`` errors, stdout for a watcher's or arm's
``watcher: FAILED - …``) with an exit status docs/cli.md documents, never a traceback, and must
lose nothing that was durable before: a file that is not ours is never rewritten or deleted,
and rows appended before the failure are all there once the cause is removed.

Tests run as root in CI's container, where ``chmod 0500`` does not stop writes: the unwritable
case then uses a read-only bind mount, and the full case a small tmpfs. Where mounting is not
permitted those cases are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from chaos_support import (
    DEADLINE,
    base_env,
    fm_argv,
    lock_states,
    run_fm,
    stop_watcher,
)
from firstmate.continuity.watchchild import REASON_RE
from firstmate.store.home import Home
from firstmate.store.identity import matches
from firstmate.testing.procs import eventually

pytestmark = pytest.mark.slow

WAKE_CODES = {0, 1, 2, 3, 4}
ARM_CODES = {0, 1, 2, 3, 4, 129, 130, 143}
SYMLINK = "refusing symlinked state path"


# --- helpers -------------------------------------------------------------------------------


class Rig:
    def __init__(self, tmp: Path, root: Path | None = None) -> None:
        self.tmp = tmp
        self.root = root or tmp / "home"
        self.home = Home(self.root)
        self.env = base_env(self.root, FM_ARM_CONFIRM_TIMEOUT="10")

    def fm(self, *args: str | bytes, **extra: str) -> subprocess.CompletedProcess[bytes]:
        return run_fm({**self.env, **extra}, *args)

    def append(self, n: int) -> list[int]:
        seqs = []
        for i in range(n):
            done = self.fm("wake", "append", "signal", f"k{i}", f"signal: durable {i}")
            assert done.returncode == 0, done.stderr
            seqs.append(int(done.stdout))
        return seqs

    def rows(self) -> list[tuple[int, str]]:
        """The queued rows, read behind the API's back (read-only)."""
        uri = f"file:{self.home.db}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
            return [(int(s), str(k)) for s, k in conn.execute("SELECT seq, key FROM wakes ORDER BY seq")]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    made.home.ensure()
    try:
        yield made
    finally:
        with contextlib.suppress(Exception):
            stop_watcher(made.home)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_one_line(done: subprocess.CompletedProcess[bytes], codes: set[int],
                    expect: int | None = None, *, contains: str = "") -> str:
    """Exactly one non-empty line over stdout and stderr, a documented status, no traceback."""
    out = done.stdout.decode("utf-8", "replace")
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in out + err and "internal error" not in out + err, out + err
    lines = [line for line in (out + "\n" + err).splitlines() if line.strip()]
    assert len(lines) == 1, f"rc={done.returncode} expected one line, got {lines!r}"
    assert done.returncode in codes, f"undocumented exit {done.returncode}: {lines}"
    if expect is not None:
        assert done.returncode == expect, f"exit {done.returncode}, wanted {expect}: {lines}"
    assert contains in lines[0], lines[0]
    return lines[0]


#: (argv, documented codes) for the commands every hostile case is put through.
COMMANDS: tuple[tuple[tuple[str, ...], set[int]], ...] = (
    (("wake", "append", "signal", "hostile", "signal: hostile"), WAKE_CODES),
    (("wake", "drain"), WAKE_CODES),
    (("wake", "drain", "--json"), WAKE_CODES),
    (("wake", "drain", "--ack-through", "1", "--recovery-generation", "g1"), WAKE_CODES),
    (("wake", "query", "--json"), WAKE_CODES),
    (("arm",), ARM_CODES),
    (("arm", "--stop"), ARM_CODES),
    (("arm", "--restart"), ARM_CODES),
    (("watch",), {0, 1, 4}),
)


def every_command_refuses(rig: Rig, contains: str, *, stop_inspects: bool = False) -> None:
    """Every command exits 4 naming *contains*; ``fm arm --stop``, which opens nothing but the
    singleton, finds no watcher to stop unless the unsafe path is on its way
    (*stop_inspects*)."""
    for argv, codes in COMMANDS:
        done = rig.fm(*argv)
        if argv == ("arm", "--stop") and not stop_inspects:
            assert_one_line(done, codes, 0, contains="watcher: none running")
        else:
            assert_one_line(done, codes, 4, contains=contains)


# --- symlinked state -----------------------------------------------------------------------


def _link_aside(path: Path) -> Path:
    """Move *path* aside and put a symlink to the moved file in its place."""
    aside = path.with_name(path.name + ".real")
    path.rename(aside)
    path.symlink_to(aside)
    return aside


def test_a_symlinked_database_is_refused_and_never_followed(rig: Rig) -> None:
    rig.append(3)
    aside = _link_aside(rig.home.db)
    before = sha(aside)
    every_command_refuses(rig, SYMLINK)
    assert rig.home.db.is_symlink() and sha(aside) == before
    rig.home.db.unlink()
    aside.rename(rig.home.db)
    assert [k for _, k in rig.rows()] == ["k0", "k1", "k2"]


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_a_symlinked_database_companion_is_refused(rig: Rig, suffix: str) -> None:
    rig.append(2)
    target = rig.tmp / f"elsewhere{suffix}"
    target.write_bytes(b"not yours")
    Path(f"{rig.home.db}{suffix}").symlink_to(target)
    every_command_refuses(rig, SYMLINK)
    assert target.read_bytes() == b"not yours"
    Path(f"{rig.home.db}{suffix}").unlink()
    assert [k for _, k in rig.rows()] == ["k0", "k1"]


@pytest.mark.parametrize("name", ["queue", "watch"])
def test_a_symlinked_lock_file_is_refused(rig: Rig, name: str) -> None:
    rig.append(2)
    lock = rig.home.lock_path(name)
    lock.unlink(missing_ok=True)
    target = rig.tmp / f"{name}.target"
    target.write_bytes(b"precious")
    lock.symlink_to(target)
    if name == "queue":
        for argv, codes in COMMANDS[:4]:
            assert_one_line(rig.fm(*argv), codes, 4, contains=SYMLINK)
    else:
        for argv, codes in COMMANDS[5:]:
            assert_one_line(rig.fm(*argv), codes, 4, contains=SYMLINK)
    assert target.read_bytes() == b"precious" and lock.is_symlink()
    lock.unlink()
    assert [k for _, k in rig.rows()] == ["k0", "k1"]


def test_a_symlinked_state_directory_is_refused(rig: Rig) -> None:
    rig.append(2)
    real = rig.root / "state.real"
    rig.home.state.rename(real)
    rig.home.state.symlink_to(real)
    before = sha(real / "firstmate.db")
    every_command_refuses(rig, SYMLINK, stop_inspects=True)
    assert sha(real / "firstmate.db") == before
    rig.home.state.unlink()
    real.rename(rig.home.state)
    assert [k for _, k in rig.rows()] == ["k0", "k1"]


def test_a_symlinked_beacon_is_replaced_never_followed(rig: Rig) -> None:
    """The beacon is the watcher's own file: a planted link is removed at the claim, its target
    is never created or touched, and the cycle runs normally."""
    target = rig.tmp / "beacon-target"
    rig.home.beacon.symlink_to(target)
    rig.append(1)
    done = rig.fm("arm")
    out = done.stdout.decode()
    assert done.returncode == 0, (out, done.stderr)
    assert REASON_RE.match(out.splitlines()[-1]), out
    assert not target.exists()
    assert not rig.home.beacon.is_symlink()


def test_a_symlinked_crew_status_file_is_refused_and_the_queue_still_drains(rig: Rig) -> None:
    assert rig.fm("crew", "add", "w1", "--pane", "fleet:0.1").returncode == 0
    target = rig.tmp / "status-target"
    target.write_bytes(b"1\tdone: not yours\n")
    status = rig.home.crew_dir / "w1.status"
    status.unlink(missing_ok=True)
    status.symlink_to(target)
    done = rig.fm("crew", "status", "w1", "done: parser")
    assert_one_line(done, {0, 1, 2, 3, 4}, 4, contains=SYMLINK)
    rig.append(1)
    drained = rig.fm("wake", "drain")
    assert drained.returncode == 0, drained.stderr
    assert drained.stdout.decode().splitlines()[1] == "  #1 [k0] signal: durable 0"
    assert b"Traceback" not in drained.stderr
    assert target.read_bytes() == b"1\tdone: not yours\n" and status.is_symlink()


# --- a file where a directory is expected, unwritable and full state ----------------------


def test_a_file_where_the_state_directory_belongs(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.root.mkdir()
    state = rig.root / "state"
    state.write_bytes(b"someone's notes")
    for argv, codes in COMMANDS:
        # Every command, arm --stop included, refuses the unsafe home the same way.
        done = rig.fm(*argv)
        assert_one_line(done, codes, 4, contains="exists but is not a directory")
    assert (rig.root / "state").read_bytes() == b"someone's notes"


@contextlib.contextmanager
def mounted(args: list[str], target: Path, why: str) -> Iterator[None]:
    """``mount ARGS… TARGET`` for the block; skips the test (with *why*) when not permitted."""
    if shutil.which("mount") is None:
        pytest.skip(f"no mount binary: {why}")
    done = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} not permitted here ({done.stderr.strip()}): {why}")
    try:
        yield
    finally:
        if subprocess.run(["umount", str(target)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


@contextlib.contextmanager
def unwritable(state: Path) -> Iterator[None]:
    """Make *state* unwritable for this user: chmod 0500, or as root a read-only bind mount
    (root writes through any mode)."""
    if os.geteuid() != 0:
        state.chmod(0o500)
        try:
            yield
        finally:
            state.chmod(0o700)
        return
    why = "as root chmod cannot make a directory unwritable"
    with mounted(["--bind", str(state)], state, why):
        remount = subprocess.run(["mount", "-o", "remount,bind,ro", str(state)],
                                 capture_output=True, text=True, check=False)
        if remount.returncode != 0:
            pytest.skip(f"read-only remount not permitted ({remount.stderr.strip()}): {why}")
        yield


def test_an_unwritable_state_directory(rig: Rig) -> None:
    rig.append(2)
    before = sha(rig.home.db)
    with unwritable(rig.home.state):
        probe = rig.home.state / "probe"
        with pytest.raises(OSError):
            probe.write_bytes(b"x")
        for argv, codes in COMMANDS:
            expect = 0 if argv == ("arm", "--stop") else 4  # nothing runs: nothing to stop
            line = assert_one_line(rig.fm(*argv), codes, expect)
            if expect == 4:
                assert "writable" in line or "read-only" in line.lower(), line
    assert sha(rig.home.db) == before
    assert [k for _, k in rig.rows()] == ["k0", "k1"]
    assert rig.fm("wake", "append", "signal", "after", "signal: after").returncode == 0


def _fill(directory: Path) -> Path:
    """Fill the filesystem holding *directory* to the last byte; returns the filler file."""
    filler = directory / "filler"
    chunk = b"\0" * 4096
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
    finally:
        os.close(fd)
    return filler


@contextlib.contextmanager
def tiny_disk(tmp_path: Path) -> Iterator[tuple[Path, Rig]]:
    """A home on its own 512 KiB tmpfs (skipped where mounting one is not permitted)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    with mounted(["-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs"], disk,
                 "a full filesystem needs a small tmpfs"):
        rig = Rig(tmp_path, disk / "home")
        rig.home.ensure()
        yield disk, rig


def test_a_full_state_directory(tmp_path: Path) -> None:
    with tiny_disk(tmp_path) as (disk, rig):
        rig.append(3)
        before = [k for _, k in rig.rows()]
        filler = _fill(disk)
        try:
            for argv, codes in COMMANDS:
                done = rig.fm(*argv)
                if argv == ("arm", "--stop"):
                    assert_one_line(done, codes, 0, contains="watcher: none running")
                elif argv[:2] == ("wake", "query") and done.returncode == 0:
                    assert json.loads(done.stdout)["depth"] == 3  # reading needs no space
                else:
                    assert_one_line(done, codes, 4)
        finally:
            filler.unlink()
        assert [k for _, k in rig.rows()] == before
        assert rig.fm("wake", "append", "signal", "after", "signal: after").returncode == 0


def test_a_full_disk_refuses_every_state_write_in_one_line(tmp_path: Path) -> None:
    """ENOSPC from a tiny tmpfs: crew registration and reports, checks and the host's config
    are each refused with exit 4 and one line, and a status log is whole or unchanged."""
    with tiny_disk(tmp_path) as (disk, rig):
        assert rig.fm("crew", "add", "c1", "--pane", "%1").returncode == 0
        log = rig.home.crew_dir / "c1.status"
        before = b""
        filler = _fill(disk)
        try:
            # (A first report needs a new block: the disk has none.)
            for argv in (("crew", "status", "c1", "needs-decision: key=k " + "x" * 300),
                         ("crew", "add", "c2", "--pane", "%2"),
                         ("check", "add", "disk", "--", "df", "-h"),
                         ("host", "enable")):
                done = rig.fm(*argv)
                assert done.returncode == 4, (argv, done.returncode, done.stdout, done.stderr)
                assert_one_line(done, {0, 2, 3, 4}, 4)
            assert not log.exists() or log.read_bytes() == before  # whole or absent
        finally:
            filler.unlink()
        assert rig.fm("crew", "status", "c1", "done: after").returncode == 0
        assert log.read_bytes().endswith(b"\tdone: after\n") and log.read_bytes().count(b"\n") == 1


def test_a_disk_that_fills_while_the_database_is_open(tmp_path: Path) -> None:
    """With another connection keeping the WAL index, SQLite itself reports the full disk."""
    with tiny_disk(tmp_path) as (disk, rig):
        rig.append(2)
        keeper = sqlite3.connect(str(rig.home.db), timeout=30)
        try:
            keeper.execute("SELECT count(*) FROM wakes").fetchone()
            filler = _fill(disk)
            # Leave two pages: enough for a lock's owner record, not for the WAL frames.
            os.truncate(filler, max(0, filler.stat().st_size - 8192))
            try:
                big = "x" * 3000
                for i in range(3):
                    done = rig.fm("wake", "append", "signal", f"full{i}", big)
                    line = assert_one_line(done, WAKE_CODES, 4)
                    assert "space" in line.lower() or "full" in line.lower(), line
            finally:
                filler.unlink()
        finally:
            keeper.close()
        assert [k for _, k in rig.rows()] == ["k0", "k1"]
        assert rig.fm("wake", "append", "signal", "after", "signal: after").returncode == 0


# --- the home removed mid-cycle ------------------------------------------------------------


def test_the_home_removed_while_an_arm_follows_its_watcher(rig: Rig) -> None:
    arm = subprocess.Popen(fm_argv("arm"), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env={**rig.env, "FM_ARM_ATTACH_POLL": "0.2"})
    try:
        assert arm.stdout is not None
        first = arm.stdout.readline().decode()
        assert first.startswith("watcher: started pid="), first
        watcher_pid = int(first.split("pid=", 1)[1].split()[0])
        remove_home(rig.root)
        out, err = arm.communicate(timeout=DEADLINE)
    finally:
        if arm.poll() is None:
            arm.kill()
            arm.wait()
    lines = [line for line in out.decode().splitlines() if line.strip()]
    assert arm.returncode == 1, (lines, err)
    assert lines == [f"watcher: FAILED - arm ground removed: {rig.root} no longer exists"]
    assert b"Traceback" not in err
    from firstmate.store.identity import identity_of

    ident = identity_of(watcher_pid)
    if ident is not None:  # the arm stopped its child; it must not linger
        eventually(f"watcher {watcher_pid} to end with its removed home",
                   lambda: not matches(ident), DEADLINE)


def test_the_home_removed_under_a_bare_watcher(rig: Rig) -> None:
    watch = subprocess.Popen(fm_argv("watch"), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env={**rig.env, "FM_POLL": "1"})
    try:
        eventually("the watcher's beacon", rig.home.beacon.exists, DEADLINE)
        remove_home(rig.root)
        out, err = watch.communicate(timeout=DEADLINE)
    finally:
        if watch.poll() is None:
            watch.send_signal(signal.SIGKILL)
            watch.wait()
    assert watch.returncode == 4, (out, err)
    assert out == b""
    lines = err.decode().splitlines()
    assert lines[-1] == f"watcher: {rig.root} no longer exists; ending this cycle", lines
    # A removal that lands in the middle of a poll may first fail a source, which the watcher
    # reports once per source (docs/watcher.md) before its next ground check ends the cycle.
    assert all(line.startswith("watcher: source ") for line in lines[:-1]), lines


def remove_home(root: Path) -> None:
    """Remove the home in one step (a rename; the watcher may be writing into it meanwhile)."""
    gone = root.with_name(root.name + ".removed")
    root.rename(gone)
    shutil.rmtree(gone, ignore_errors=True)


# --- corrupt databases ---------------------------------------------------------------------


def _random_bytes(db: Path, good: bytes) -> None:
    db.write_bytes(hashlib.sha256(b"seed").digest() * 2048)


def _truncated(db: Path, good: bytes) -> None:
    db.write_bytes(good[:3000])  # less than one page: nothing SQLite could write back into


def _torn_header(db: Path, good: bytes) -> None:
    db.write_bytes(good[:100] + b"\xff" * 4000 + good[4100:])


def _foreign(db: Path, good: bytes) -> None:
    db.unlink()
    with contextlib.closing(sqlite3.connect(str(db))) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('the other program''s data')")
        conn.commit()


def _newer(db: Path, good: bytes) -> None:
    with contextlib.closing(sqlite3.connect(str(db))) as conn:
        conn.execute("PRAGMA user_version = 999")
        conn.commit()


def _directory(db: Path, good: bytes) -> None:
    db.unlink()
    db.mkdir()
    (db / "keep").write_bytes(b"inside")


CORRUPTIONS: dict[str, tuple[Callable[[Path, bytes], None], str]] = {
    "random-bytes": (_random_bytes, "is not a Firstmate database"),
    "truncated": (_truncated, "is not a Firstmate database"),
    "torn-pages": (_torn_header, "is not a Firstmate database"),
    "foreign-sqlite": (_foreign, "an SQLite database of another program"),
    "newer-firstmate": (_newer, "written by a newer Firstmate"),
    "a-directory": (_directory, "is not a Firstmate database"),
}


def _digest(path: Path) -> str:
    if path.is_dir():
        return "dir:" + ",".join(f"{p.name}={sha(p)}" for p in sorted(path.iterdir()))
    return sha(path)


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_a_corrupt_database_is_refused_and_never_rewritten(rig: Rig, case: str) -> None:
    rig.append(3)
    good = rig.home.db.read_bytes()
    (rig.tmp / "backup.db").write_bytes(good)
    corrupt, message = CORRUPTIONS[case]
    corrupt(rig.home.db, good)
    for suffix in ("-wal", "-shm"):
        Path(f"{rig.home.db}{suffix}").unlink(missing_ok=True)
    before = _digest(rig.home.db)
    for argv, codes in COMMANDS:
        done = rig.fm(*argv)
        if argv == ("arm", "--stop"):
            assert_one_line(done, codes, 0, contains="watcher: none running")
        else:
            assert_one_line(done, codes, 4, contains=message)
    assert _digest(rig.home.db) == before, "the unusable database was rewritten"
    if case != "newer-firstmate":  # ours, in WAL mode: SQLite may keep its -shm beside it
        assert not Path(f"{rig.home.db}-wal").exists()
    # The fix the message names: move it aside. Nothing durable was lost.
    aside = rig.tmp / "moved-aside"
    rig.home.db.rename(aside)
    assert _digest(aside) == before
    (rig.tmp / "backup.db").rename(rig.home.db)
    assert [k for _, k in rig.rows()] == ["k0", "k1", "k2"]
    assert all(state in ("free", "held") for state, _ in lock_states(rig.home).values())


def test_fm_status_reports_a_corrupt_database_in_one_line(rig: Rig) -> None:
    rig.append(1)
    rig.home.db.write_bytes(b"garbage" * 1000)
    done = rig.fm("status", "--json")
    assert_one_line(done, {0, 4}, 4, contains="is not a Firstmate database")


def test_json_outputs_stay_json_for_an_unusable_row(rig: Rig) -> None:
    """A hand-written row that is not UTF-8 is retired by the drain with a report, not fatal."""
    rig.append(1)
    with contextlib.closing(sqlite3.connect(str(rig.home.db), timeout=30)) as conn:
        conn.execute("INSERT INTO wakes (seq, at, kind, key, payload) VALUES "
                     "(50, 1.0, 'signal', CAST(X'6bff' AS TEXT), CAST(X'1b5b326a' AS TEXT))")
        conn.commit()
    done = rig.fm("wake", "drain", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [r["seq"] for r in result["rows"]] == [1]
    assert any("retired 1 unusable" in n for n in result["notices"]), result["notices"]
    assert "\x1b" not in done.stdout.decode("utf-8", "replace")
