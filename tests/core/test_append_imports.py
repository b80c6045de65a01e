"""`fm wake append`'s fast path: what it imports, and that it is the same append as queue.append."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

from firstmate.base import wakeinput
from firstmate.base.dbconn import SCHEMA_VERSION
from firstmate.base.ownerlock import record_json
from firstmate.fast import appendpath, episoderow
from firstmate.store import database as store
from firstmate.store.home import Home
from firstmate.store.locks import FileLock
from hypothesis import given
from hypothesis import strategies as st
from wakeq_support import child_env, finish, fm, python, read_line

#: Never on the append path: attrs (the project's classes), and the heavy optional imports.
FORBIDDEN = ("attr", "attrs", "psutil", "pluggy", "argparse", "portalocker", "importlib.metadata")
#: Cheap to avoid, so the path avoids them (a regression here costs every harness turn).
AVOIDED = ("hashlib", "socket", "json", "firstmate.store.database", "firstmate.store.locks", "firstmate.store.queue",
           "firstmate.store.episodes", "firstmate.store.identity", "firstmate.store.home", "firstmate.store.doorbell")


def imported_modules(stderr: str) -> set[str]:
    """Module names from ``python -X importtime`` output."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def episode_row(home: Home) -> tuple[object, ...] | None:
    conn = sqlite3.connect(str(home.db))
    try:
        return conn.execute("SELECT status, kind, generation FROM episode WHERE id = 1").fetchone()
    finally:
        conn.close()


def wake_rows(home: Home) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(str(home.db))
    try:
        return list(conn.execute("SELECT seq, kind, key, payload, claim FROM wakes ORDER BY seq"))
    finally:
        conn.close()


def test_cli_append_never_imports_attrs_and_lands_with_downtime_evidence(fm_home: Home) -> None:
    # The first append creates the database (through the store, outside the fast path).
    assert fm(fm_home, "wake", "append", "heartbeat", "setup", "heartbeat").returncode == 0
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "firstmate", "wake", "append", "signal",
         "t1.status", "signal: t1 done"],
        capture_output=True, text=True, timeout=60, env=child_env(fm_home), check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "2\n"
    names = imported_modules(out.stderr)
    assert "firstmate.fast.appendpath" in names  # the measurement saw the path
    assert sorted(n for n in FORBIDDEN if n in names) == []
    assert not [n for n in names if n.startswith(("attr.", "psutil.", "pluggy."))]
    assert wake_rows(fm_home)[-1] == (2, "signal", "t1.status", "signal: t1 done", None)
    row = episode_row(fm_home)
    assert row is not None and row[:2] == ("pending", "downtime")
    assert episoderow.valid_generation(row[2])


def test_cli_append_imports_only_what_it_needs(fm_home: Home) -> None:
    assert fm(fm_home, "wake", "append", "heartbeat", "setup", "heartbeat").returncode == 0
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "from firstmate.cli.main import main\n"
        "rc = main(['wake', 'append', 'stale', 'w1', 'stale: w1'])\n"
        "print(rc, ','.join(sorted(set(sys.modules) - before)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=child_env(fm_home), check=False)
    assert out.returncode == 0, out.stderr
    rc, _, new = out.stdout.splitlines()[-1].partition(" ")
    loaded = set(new.split(","))
    assert rc == "0"
    assert sorted(n for n in (*FORBIDDEN, *AVOIDED) if n in loaded) == []


def test_cli_append_leaves_the_database_file_whole(fm_home: Home, tmp_path: Path) -> None:
    # The process leaves without the interpreter's teardown once its number is printed, but
    # closes its connection first: the last close checkpoints, so the database file alone (a
    # plain copy, as a backup takes it) holds every row and no write-ahead log is left behind.
    assert fm(fm_home, "wake", "append", "heartbeat", "setup", "heartbeat").returncode == 0
    for i in range(3):
        done = fm(fm_home, "wake", "append", "signal", f"k{i}.status", f"signal: k{i}")
        assert (done.returncode, done.stdout, done.stderr) == (0, f"{i + 2}\n", "")
    assert not fm_home.db.with_name(fm_home.db.name + "-wal").exists()
    copy = tmp_path / "copy.db"
    copy.write_bytes(fm_home.db.read_bytes())
    conn = sqlite3.connect(str(copy))
    try:
        keys = [r[0] for r in conn.execute("SELECT key FROM wakes ORDER BY seq")]
    finally:
        conn.close()
    assert keys == ["setup", "k0.status", "k1.status", "k2.status"]


def test_append_called_in_process_returns_to_its_caller(fm_home: Home) -> None:
    assert fm(fm_home, "wake", "append", "heartbeat", "setup", "heartbeat").returncode == 0
    code = ("from firstmate.cli.main import main\n"
            "rc = main(['wake', 'append', 'signal', 'k', 'p'])\n"
            "print('returned', rc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=child_env(fm_home), check=False)
    assert (out.returncode, out.stdout.splitlines()) == (0, ["2", "returned 0"]), out.stderr


def test_fresh_home_and_older_schema_go_through_the_store(fm_home: Home) -> None:
    # No database yet: the store creates it, then the same append runs.
    assert not fm_home.db.exists()
    first = fm(fm_home, "wake", "append", "signal", "a", "p")
    assert (first.returncode, first.stdout, first.stderr) == (0, "1\n", "")
    # A database one migration behind: the store migrates it, then the append lands.
    conn = sqlite3.connect(str(fm_home.db), isolation_level=None)
    for table in ("fleet_seen", "fleet_inbox", "fleet_hosts"):  # (the newest migration's)
        conn.execute(f"DROP TABLE {table}")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    conn.close()
    second = fm(fm_home, "wake", "append", "signal", "b", "p")
    assert (second.returncode, second.stdout, second.stderr) == (0, "2\n", "")
    conn = sqlite3.connect(str(fm_home.db))
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()
    assert [r[2] for r in wake_rows(fm_home)] == ["a", "b"]


def test_newer_schema_is_refused_without_writing(fm_home: Home) -> None:
    assert fm(fm_home, "wake", "append", "signal", "a", "p").returncode == 0
    conn = sqlite3.connect(str(fm_home.db), isolation_level=None)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    out = fm(fm_home, "wake", "append", "signal", "b", "p")
    assert out.returncode == 4
    assert "written by a newer Firstmate" in out.stderr
    assert len(wake_rows(fm_home)) == 1


def test_schema_version_matches_the_migrations() -> None:
    assert len(store.MIGRATIONS) == SCHEMA_VERSION


def test_fast_path_lock_record_names_its_holder(fm_home: Home) -> None:
    # A process holding the queue lock the way the fast path takes it is named by FileLock.
    lock_path = fm_home.lock_path("queue")
    code = (
        "import sys\n"
        "from firstmate.base.ownerlock import flock_with_record\n"
        "fd = flock_with_record(sys.argv[1], 'queue', sys.argv[2])\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = python(code, fm_home, str(lock_path), str(fm_home.root))
    try:
        assert read_line(proc) == "held"
        rec = FileLock(lock_path, role="queue", home=fm_home.root).holder()
        assert rec is not None and rec.verified
        assert (rec.pid, rec.role, rec.home) == (proc.pid, "queue", str(fm_home.root))
    finally:
        finish(proc)


def test_append_clears_the_lock_record(fm_home: Home) -> None:
    assert fm(fm_home, "wake", "append", "signal", "a", "p").returncode == 0
    assert fm_home.lock_path("queue").read_bytes() == b""
    assert FileLock(fm_home.lock_path("queue"), role="queue", home=fm_home.root).holder() is None


def test_queue_append_and_the_cli_share_one_implementation() -> None:
    from firstmate.store import queue

    assert queue.clean is wakeinput.clean and queue.validate is wakeinput.validate
    assert queue.KINDS is wakeinput.KINDS
    assert appendpath.insert.__module__ == "firstmate.fast.appendpath"


_TEXT = st.text(alphabet=st.characters(codec=None), max_size=40)


@given(pid=st.integers(1, 2**31), identity=_TEXT, home=_TEXT, role=_TEXT,
       at=st.floats(allow_nan=False, allow_infinity=False))
def test_owner_record_is_json_dumps(pid: int, identity: str, home: str, role: str, at: float) -> None:
    expected = json.dumps({"pid": pid, "identity": identity, "home": home, "role": role,
                           "acquired_at": at}, sort_keys=True)
    assert record_json(pid, identity, home, role, at) == expected


@given(text=st.text(max_size=60) | st.text(alphabet="\x1b[]0123456789;m\t\r\n\x07\\ab", max_size=60))
def test_clean_shortcut_matches_the_patterns(text: str) -> None:
    surrogates, escapes, breaks, controls = wakeinput._patterns()
    expected = controls.sub("", breaks.sub(" ", escapes.sub("", surrogates.sub("\ufffd", text))))
    assert wakeinput.clean(text) == expected


@given(value=st.text(max_size=140) | st.text(alphabet="Az09._-/: \n", max_size=12))
def test_generation_check_matches_the_pattern(value: str) -> None:
    expected = len(value) <= episoderow.GENERATION_MAX and re.fullmatch(r"[A-Za-z0-9._-]+", value) is not None
    assert episoderow.valid_generation(value) is expected


def test_bad_input_writes_nothing(fm_home: Home) -> None:
    out = fm(fm_home, "wake", "append", "bogus", "k", "p")
    assert out.returncode == 2
    assert not fm_home.db.exists()
    assert not fm_home.lock_path("queue").exists()
