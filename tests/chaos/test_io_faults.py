"""I/O faults on append, acknowledgement and drain: every outcome fm reports is true.

Faults come from ``fiu-run`` (Debian's ``fiu-utils``; CI installs it and sets
``FM_TEST_REQUIRE_FIU=1``, so there a missing ``fiu-run`` fails instead of skipping): with
``-x`` the C library's ``fsync``/``fdatasync`` (``posix/io/sync/*``), ``pread``
(``posix/io/rw/pread``, SQLite's reads) and ``pwrite`` (``posix/io/rw/pwrite``, SQLite's writes)
fail for the one ``fm`` process, always, once (``onetime``) or at random. Plain ``write`` and
``read`` faults are not used: they hit the interpreter's own imports and its stderr, so they
would test Python, not fm.

What is checked, from a fresh connection once the faulted process has ended (which recovers the
write-ahead log, so a commit that "failed" but took effect shows): an append that exits 0 is
queued exactly once at the number it printed; one that fails is not queued, or says it may be
(and running it again queues it once); an acknowledgement's report matches what it consumed; a
drain that exits 0 claimed what it printed; and no fault ever makes fm advise moving a healthy
database aside. A process holding the database open (as a running watcher does) keeps committed
frames in the log, and is killed, not closed, before the check, so nothing tidies the log first.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from chaos_support import DEADLINE, DOCUMENTED, base_env, fm_argv
from firstmate.store.home import Home

pytestmark = pytest.mark.slow

FIU = shutil.which("fiu-run")
#: Set where fiu-run must be present (CI): its absence then fails the tests.
REQUIRE_ENV = "FM_TEST_REQUIRE_FIU"
ALWAYS_SYNC = "enable name=posix/io/sync/*"
ONCE_SYNC = "enable name=posix/io/sync/*,onetime"
ACK_RE = re.compile(r"fm wake drain --ack-through (\d+) --recovery-generation (\S+)")
#: What a failed append or acknowledgement says when whether it took effect is not known.
MAYBE = "may or may not"


@pytest.fixture(autouse=True)
def _fiu() -> None:
    if FIU is None:
        why = "fiu-run is not installed (Debian's fiu-utils: apt-get install fiu-utils)"
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{REQUIRE_ENV} is set but {why}")
        pytest.skip(why)


class Rig:
    def __init__(self, tmp: Path) -> None:
        self.home = Home(tmp / "home").ensure()
        self.env = base_env(self.home.root)

    def fm(self, *args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [str(a) for a in fm_argv(*args)]
        if fault is not None:
            assert FIU is not None
            # (-f "": no control pipes left in $TMPDIR)
            argv = [FIU, "-x", "-f", "", "-c", fault, *argv]
        return subprocess.run(argv, capture_output=True, text=True, env=self.env,
                              timeout=DEADLINE, check=False, stdin=subprocess.DEVNULL)

    def append(self, key: str) -> int:
        done = self.fm("wake", "append", "signal", key, f"signal: {key}")
        assert done.returncode == 0, done.stderr
        return int(done.stdout)

    def rows(self) -> list[tuple[int, str, str | None]]:
        """The queue as a fresh connection finds it (recovering the log as the next fm would)."""
        with contextlib.closing(sqlite3.connect(str(self.home.db), timeout=30)) as conn:
            return [(int(s), str(k), c) for s, k, c in
                    conn.execute("SELECT seq, key, claim FROM wakes ORDER BY seq")]

    def keys(self) -> list[str]:
        return [key for _seq, key, _claim in self.rows()]

    def integrity(self) -> str:
        with contextlib.closing(sqlite3.connect(str(self.home.db), timeout=30)) as conn:
            return str(conn.execute("PRAGMA integrity_check").fetchone()[0])

    @contextlib.contextmanager
    def held_open(self) -> Iterator[None]:
        """Another process with the database open (a watcher's connection): the log keeps the
        frames committed meanwhile. Killed at the end, as a crash would end it."""
        code = ("import sqlite3, sys, time\n"
                f"c = sqlite3.connect({str(self.home.db)!r})\n"
                "c.execute('SELECT count(*) FROM wakes').fetchone()\n"
                "print('ready', flush=True)\n"
                "time.sleep(600)\n")
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            yield
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=DEADLINE)
            if proc.stdout is not None:
                proc.stdout.close()

    def ack_command(self) -> tuple[str, str]:
        done = self.fm("wake", "drain")
        assert done.returncode == 0, done.stderr
        found = ACK_RE.search(done.stdout + done.stderr)
        assert found, done.stdout + done.stderr
        return found.group(1), found.group(2)


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    made = Rig(tmp_path)
    made.append("setup")
    return made


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The failed command's report: one line, a documented status, no traceback, and never
    the advice to move a database aside (every database here is healthy)."""
    assert done.returncode in DOCUMENTED, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    # (the advice fm gives for a database it found damaged)
    assert "is not a Firstmate database" not in lines[0], lines[0]
    assert "move it aside and run fm again" not in lines[0], lines[0]
    return lines[0]


# --- deterministic: the fault that made the report false -------------------------------------


def test_an_append_whose_sync_fails_once_is_queued_once(rig: Rig) -> None:
    with rig.held_open():
        rig.append("before")  # (a commit in the log, as a watcher's home always has)
        done = rig.fm("wake", "append", "signal", "k", "signal: k", fault=ONCE_SYNC)
    # The failed sync is settled and the append tried again: it is queued, once.
    assert done.returncode == 0, done.stderr
    assert [(seq, key) for seq, key, _ in rig.rows()] == [(1, "setup"), (2, "before"),
                                                          (int(done.stdout), "k")]


def test_an_append_left_in_doubt_says_so_and_running_it_again_queues_it_once(rig: Rig) -> None:
    with rig.held_open():
        rig.append("before")
        done = rig.fm("wake", "append", "signal", "k", "signal: k", fault=ALWAYS_SYNC)
    line = one_line(done)
    assert done.returncode == 4 and MAYBE in line and "same append again" in line, line
    assert rig.keys().count("k") <= 1
    again = rig.append("k")
    assert rig.keys().count("k") == 1 and ("k" in dict((k, s) for s, k, _ in rig.rows()))
    assert dict((key, seq) for seq, key, _ in rig.rows())["k"] == again
    assert not (rig.home.state / "spool" / ".doubt").exists()
    assert rig.integrity() == "ok"


@pytest.mark.parametrize("fault", [ONCE_SYNC, ALWAYS_SYNC])
def test_an_acknowledgement_whose_sync_fails_reports_what_it_consumed(rig: Rig, fault: str) -> None:
    with rig.held_open():
        rig.append("a")
        through, generation = rig.ack_command()
        done = rig.fm("wake", "drain", "--ack-through", through, "--recovery-generation",
                      generation, fault=fault)
    left = rig.keys()
    if done.returncode == 0:
        assert left == [], "the acknowledgement exited 0 but consumed nothing"
    else:
        line = one_line(done)
        if "nothing was acknowledged" in line:
            assert left == ["setup", "a"], f"{line!r} but the rows are gone"
        else:
            assert MAYBE in line, line
    if fault == ONCE_SYNC:  # one failed sync: settled, and the acknowledgement goes through
        assert done.returncode == 0, done.stderr
    else:
        again = rig.fm("wake", "drain", "--ack-through", through, "--recovery-generation",
                       generation)
        assert again.returncode == 0, again.stderr
        assert rig.keys() == []


def test_read_faults_never_advise_moving_a_healthy_database_aside(rig: Rig) -> None:
    commands = [("wake", "query"), ("status",), ("wake", "drain"),
                ("wake", "append", "check", "r", "check: r")]
    told: list[tuple[int, str, str]] = []
    with rig.held_open():
        for i in range(4):
            rig.append(f"w{i}")  # frames in the log: reads go through it
        for i in range(40):
            args = commands[i % len(commands)]
            done = rig.fm(*args, fault="enable_random name=posix/io/rw/pread,probability=0.3")
            if done.returncode != 0:
                one_line(done)
            if args[1:2] == ("append",):
                told.append((done.returncode, done.stdout.strip(), done.stderr))
    assert rig.integrity() == "ok"
    queued = [seq for seq, key, _ in rig.rows() if key == "r"]
    said = [int(out) for rc, out, _err in told if rc == 0 and out]
    assert sorted(said) == queued, (told, queued)  # each append that said so, and no other


# --- at random: whatever fails, what is said is true ----------------------------------------


FAULTS = {
    "sync": "enable_random name=posix/io/sync/*,probability=0.5",
    "pread": "enable_random name=posix/io/rw/pread,probability=0.08",
    "pwrite": "enable_random name=posix/io/rw/pwrite,probability=0.15",
}


def _append_truthfully(rig: Rig, key: str, fault: str) -> None:
    """Append *key* under *fault* until it succeeds (the last try without faults); every
    report along the way must be true."""
    for attempt in range(6):
        done = rig.fm("wake", "append", "signal", key, f"signal: {key}",
                      fault=fault if attempt < 5 else None)
        count = rig.keys().count(key)
        if done.returncode == 0:
            assert count == 1, f"append exited 0; {key} queued {count} times"
            if done.stdout.strip():
                assert (int(done.stdout), key) in [(s, k) for s, k, _ in rig.rows()]
            return
        line = one_line(done)
        if MAYBE not in line:
            assert count == 0, f"{line!r} but {key} is queued"
        assert count <= 1
    raise AssertionError(f"{key} was never appended")


def _drain_and_ack_truthfully(rig: Rig, fault: str) -> None:
    """Drain and acknowledge under *fault* until the queue is empty; check every report."""
    for attempt in range(6):
        clean = attempt == 5
        before = rig.rows()
        done = rig.fm("wake", "drain", fault=None if clean else fault)
        if done.returncode != 0:
            one_line(done)
            continue
        found = ACK_RE.search(done.stdout + done.stderr)
        if found is None:
            assert not before, (before, done.stdout, done.stderr)
            return
        shown = {int(seq) for seq in re.findall(r"^  #(\d+) ", done.stdout, re.M)}
        claimed = {seq for seq, _key, claim in rig.rows() if claim == "main"}
        assert shown <= claimed, (shown, claimed)  # what it printed, it claimed
        through, generation = found.group(1), found.group(2)
        for ack_try in range(6):
            held = rig.keys()
            acked = rig.fm("wake", "drain", "--ack-through", through, "--recovery-generation",
                           generation, fault=None if ack_try == 5 else fault)
            left = rig.keys()
            if acked.returncode == 0:
                assert all(seq > int(through) for seq, _k, _c in rig.rows()), left
                break
            line = one_line(acked)
            if "nothing was acknowledged" in line or MAYBE not in line:
                assert left == held, f"{line!r} but {held} became {left}"
        if not rig.rows():
            return
    raise AssertionError(f"the queue never emptied: {rig.rows()}")


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_random_faults_on_append_ack_and_drain_are_reported_truthfully(rig: Rig, name: str) -> None:
    fault = FAULTS[name]
    with rig.held_open():
        for round_ in range(3):
            for i in range(3):
                _append_truthfully(rig, f"r{round_}-{i}", fault)
            _drain_and_ack_truthfully(rig, fault)
    assert rig.rows() == []
    assert rig.integrity() == "ok"


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_concurrent_appends_under_faults_are_each_queued_once(rig: Rig, name: str) -> None:
    """Producers appending at once share commits (one leads, the others ride it): a fault in
    the leader's commit or in a rider's reading of its number is reported truthfully too."""
    fault = FAULTS[name]
    assert FIU is not None
    with rig.held_open():
        for round_ in range(3):
            keys = [f"c{round_}-{i}" for i in range(4)]
            procs = {key: subprocess.Popen(
                [FIU, "-x", "-f", "", "-c", fault,
                 *[str(a) for a in fm_argv("wake", "append", "signal", key, f"signal: {key}")]],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=rig.env,
                stdin=subprocess.DEVNULL) for key in keys}
            for key, proc in procs.items():
                out, err = proc.communicate(timeout=DEADLINE)
                done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
                count = rig.keys().count(key)
                if done.returncode == 0:
                    assert count == 1, f"append exited 0; {key} queued {count} times"
                    continue
                line = one_line(done)
                if MAYBE not in line:
                    assert count == 0, f"{line!r} but {key} is queued"
                _append_truthfully(rig, key, fault)  # then run again: queued once
                assert rig.keys().count(key) == 1
    assert rig.integrity() == "ok"
