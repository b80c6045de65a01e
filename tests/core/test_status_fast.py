"""``fm status``'s attrs-free read (firstmate.fast.statusview) against the full path.

Across homes in every state the status can report, the fast snapshot must equal the full one
(text and JSON), raise the same one-line error, or hand over to the full path; and it must leave
the database exactly as the full path does. On a deep queue it imports none of the heavy modules.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from firstmate.cli import status
from firstmate.fast import statusview
from firstmate.fast.appendpath import commit_locked
from firstmate.store import grants
from firstmate.store.database import open_store
from firstmate.store.home import Home
from firstmate.testing import read_line
from test_append_imports import imported_modules
from wakeq_support import child_env, finish, insert_row, live_owner, python, raw, set_episode

#: Never imported by a status call on the fast path.
FORBIDDEN = ("attr", "attrs", "psutil", "pluggy", "argparse", "portalocker", "importlib.metadata",
             "typing", "json", "re", "pathlib", "enum", "firstmate.store.database",
             "firstmate.store.locks", "firstmate.store.identity", "firstmate.store.home")

#: A process that holds the watcher singleton with its own owner record (role argv[2]), dates
#: its beacon argv[3] seconds back (none when "-"), opens a watcher cycle in the kv mark when
#: argv[4] is "open", says "ready" and waits for stdin to close.
HOLDER = """
import os, sys, time
from pathlib import Path
from firstmate.store.database import kv_set, open_store
from firstmate.store.home import Home
from firstmate.store.identity import current
from firstmate.store.locks import FileLock
root = Path(sys.argv[1])
home = Home(root)
lock = FileLock(home.lock_path("watch"), sys.argv[2], root)
lock.acquire(0)
if sys.argv[3] != "-":
    home.beacon.touch()
    at = time.time() - float(sys.argv[3])
    os.utime(home.beacon, (at, at))
if sys.argv[4] == "open":
    db = open_store(home)
    with db.transaction() as conn:
        kv_set(conn, "watch.open", current().token())
    db.close()
print("ready", flush=True)
sys.stdin.read()
"""

Build = Callable[[Home, list[subprocess.Popen[bytes]]], None]


def holder(home: Home, procs: list[subprocess.Popen[bytes]], role: str = "watcher",
           age: str = "1.5", cycle: str = "-") -> subprocess.Popen[bytes]:
    proc = python(HOLDER, home, str(home.root), role, age, cycle)
    procs.append(proc)
    assert read_line(proc, context=lambda: proc.stderr.read().decode() if proc.stderr else "") \
        == "ready"
    return proc


def rows(home: Home, count: int = 3) -> None:
    db = open_store(home)
    try:
        conn = db.connection()
        for i in range(count):
            commit_locked(conn, db.path, home.state, (1000.0 + i, "signal", f"k{i}", f"p{i}"))
    finally:
        db.close()


def dump(home: Home) -> list[str]:
    if not home.db.is_file() or home.db.is_symlink():
        return []
    conn = sqlite3.connect(str(home.db))
    try:
        return list(conn.iterdump())
    except sqlite3.DatabaseError:  # not a database: its bytes
        return [home.db.read_bytes().hex()]
    finally:
        conn.close()


def _grant(home: Home, procs: list[subprocess.Popen[bytes]], *, gone: bool) -> None:
    rows(home, 4)
    owner = live_owner(home)
    procs.append(owner)
    db = open_store(home)
    try:
        grants.activate(db, owner.pid, "g1")
        grants.publish(db, "g1", [2, 3])
    finally:
        db.close()
    if gone:
        finish(owner)


def _killed_watcher(home: Home, procs: list[subprocess.Popen[bytes]]) -> None:
    rows(home, 2)
    set_episode(home, "acked", "downtime", "g0")  # so the publication is a new generation
    proc = holder(home, procs, cycle="open")
    os.kill(proc.pid, signal.SIGKILL)
    finish(proc)


def _unusable(home: Home, procs: list[subprocess.Popen[bytes]]) -> None:
    rows(home, 2)
    insert_row(home, 10, kind="bogus")
    insert_row(home, 11, key="  ")
    insert_row(home, 12, payload=b"\x00blob", claim="main")
    insert_row(home, 13, key="a\tb\x1b[31m", payload="line\nbreak", at=5)


def _old_schema(home: Home, procs: list[subprocess.Popen[bytes]]) -> None:
    rows(home, 1)
    with raw(home) as conn:
        conn.execute("PRAGMA user_version = 2")
        conn.execute("DROP TABLE cycle_links")


def _rows(home: Home, procs: list[subprocess.Popen[bytes]]) -> None:
    rows(home.ensure())


def _episode(status: object, kind: object, gen: object) -> Build:
    def build(home: Home, procs: list[subprocess.Popen[bytes]]) -> None:
        rows(home.ensure())
        set_episode(home, status, kind, gen)

    return build


def _with_file(relative: str, text: str) -> Build:
    def build(home: Home, procs: list[subprocess.Popen[bytes]]) -> None:
        rows(home.ensure())
        (home.root / relative).write_text(text)

    return build


def _planted_link(relative: str) -> Build:
    def build(home: Home, procs: list[subprocess.Popen[bytes]]) -> None:
        home.ensure()
        (home.root / relative).symlink_to(home.root / "elsewhere")

    return build


def _holder(*, role: str = "watcher", age: str = "1.5", cycle: str = "-",
            garble: bool = False) -> Build:
    def build(home: Home, procs: list[subprocess.Popen[bytes]]) -> None:
        rows(home.ensure())
        holder(home, procs, role, age, cycle)
        if garble:  # the kernel lock stays held; its record no longer parses
            home.lock_path("watch").write_text('{"pid": 1')

    return build


def _state_is_a_file(home: Home, procs: list[subprocess.Popen[bytes]]) -> None:
    home.root.mkdir()
    home.state.write_text("x")


def _database_link(home: Home, procs: list[subprocess.Popen[bytes]]) -> None:
    rows(home.ensure())
    home.db.rename(home.root / "db")
    home.db.symlink_to(home.root / "db")


def _database_absent(home: Home, procs: list[subprocess.Popen[bytes]]) -> None:
    home.ensure()


def _database(data: bytes | None) -> Build:
    def build(home: Home, procs: list[subprocess.Popen[bytes]]) -> None:
        home.ensure()
        if data is None:
            home.db.mkdir()
        else:
            home.db.write_bytes(data)

    return build


STATES: dict[str, Build] = {
    "never used": lambda home, procs: None,
    "prepared, no database": _database_absent,
    "empty database": lambda home, procs: open_store(home.ensure()).close(),
    "rows": _rows,
    "unusable rows": lambda home, procs: _unusable(home.ensure(), procs),
    "pending handling": _episode("pending", "handling", "g.1"),
    "announced downtime": _episode("announced", "downtime", "g.2"),
    "acked": _episode("acked", "downtime", "g3"),
    "invalid episode": _episode("weird", None, b"\xff"),
    "live grant": lambda home, procs: _grant(home.ensure(), procs, gone=False),
    "gone grant": lambda home, procs: _grant(home.ensure(), procs, gone=True),
    "away on": _with_file("state/away", ""),
    "away as a dangling link": _planted_link("state/away"),
    "live watcher": _holder(),
    "stale beacon": _holder(),  # (read with FM_GUARD_GRACE=1: see GRACE)
    "watcher without a beacon": _holder(age="-"),
    "holder of another role": _holder(role="queue"),
    "killed watcher with an open cycle": lambda home, procs: _killed_watcher(home.ensure(), procs),
    "live watcher with an open cycle": _holder(cycle="open"),
    "garbled record of a live holder": _holder(garble=True),
    "stale record of a dead holder": _with_file(
        "state/watch.lock", '{"acquired_at": 1.0, "home": "/x", "identity": "1:1.00:abcdef12", '
        '"pid": 1, "role": "watcher"}'),
    "planted lock link": _planted_link("state/watch.lock"),
    "planted beacon link": _planted_link("state/watcher.beat"),
    "state is a file": _state_is_a_file,
    "database is a link": _database_link,
    "database is a directory": _database(None),
    "database is not ours": _database(b"not sqlite" * 100),
    "database is empty": _database(b""),
    "old schema": lambda home, procs: _old_schema(home.ensure(), procs),
    "session-lock record": _with_file("state/session.lock", "{}"),
    "bridge record": _with_file("state/bridge-acme.json", "{}"),
}
#: The grace each state is read with (a beacon can only be as old as its writer).
GRACE = {"stale beacon": "1"}

#: States the fast path hands to the full one.
HANDED_OVER = {"old schema", "session-lock record", "bridge record",
               "garbled record of a live holder"}

#: What some states must show (so each builder is known to make the state it names).
WATCHER = {"live watcher": "healthy", "live watcher with an open cycle": "healthy",
           "stale beacon": "stale-beacon", "watcher without a beacon": "unverified",
           "holder of another role": "unverified", "stale record of a dead holder": "none"}
GRANT_OWNER = {"live grant": "live", "gone grant": "gone"}
REFUSED = {"planted lock link", "planted beacon link", "state is a file", "database is a link",
           "database is a directory", "database is not ours", "database is empty"}


def _outcome(read: Callable[[], dict[str, object] | None]) -> tuple[str, object]:
    try:
        return "ok", read()
    except Exception as exc:  # the comparison is of the exact error, whatever its type
        return type(exc).__name__, str(exc)


def _same_age(fast: object, full: object) -> None:
    """Beacon ages are read a moment apart: equal within the time between the reads."""
    if not (isinstance(fast, dict) and isinstance(full, dict)):
        return
    one, two = fast["watcher"], full["watcher"]
    assert isinstance(one, dict) and isinstance(two, dict)
    if one["beacon_age"] is not None and two["beacon_age"] is not None:
        assert abs(one["beacon_age"] - two["beacon_age"]) < 5
        two["beacon_age"] = one["beacon_age"]


@pytest.mark.parametrize("name", list(STATES))
def test_the_fast_snapshot_equals_the_full_one(tmp_path: Path, name: str,
                                               procs: list[subprocess.Popen[bytes]],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    home = Home(tmp_path / "home")
    STATES[name](home, procs)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env["FM_HOME"] = str(home.root)
    if name in GRACE:
        env["FM_GUARD_GRACE"] = GRACE[name]
    monkeypatch.chdir(tmp_path)
    before = dump(home)
    published: list[str] = []

    def publish(root: str) -> None:
        published.append(root)
        status._publish(root)

    fast = _outcome(lambda: statusview.snapshot(env, publish))
    after_fast = dump(home)
    full = _outcome(lambda: status.full_snapshot(env))
    after_full = dump(home)
    if name in HANDED_OVER:
        assert fast == ("ok", None)
        assert after_fast == before
        return
    assert fast[0] == full[0], (fast, full)
    assert (fast[0] == "StateError") == (name in REFUSED), fast
    if fast[0] != "ok":
        assert fast == full
        assert after_fast == before
        return
    _same_age(fast[1], full[1])
    assert fast == full
    assert isinstance(fast[1], dict)
    assert status.render(fast[1]) == status.render(full[1])  # type: ignore[arg-type]
    assert after_full == after_fast  # the full path finds nothing left to do
    data = fast[1]
    watcher, queue = data["watcher"], data["queue"]
    assert isinstance(watcher, dict) and isinstance(queue, dict)
    assert watcher["state"] == WATCHER.get(name, "none")
    if name in GRANT_OWNER:
        assert isinstance(queue["grant"], dict) and queue["grant"]["owner"] == GRANT_OWNER[name]
        assert queue["grant"]["rows"] == [2, 3]
        assert queue["pending"] == ({"main": 2, "branch": 2} if name == "live grant"
                                    else {"main": 4, "branch": 0})
    if name == "killed watcher with an open cycle":
        assert published == []  # proven gone from /proc: published without the store
        assert fast[1]["episode"] is not None and str(fast[1]["episode"]).startswith(
            "pending:downtime:")
        assert after_fast != before
    else:
        assert after_fast == before


def _cli(home: Home, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "firstmate", "status", *args],
                          capture_output=True, text=True, timeout=60, check=False,
                          env=child_env(home))


FULL = ("import sys, json\n"
        "from firstmate.base.errors import FirstmateError\n"
        "from firstmate.cli import status\n"
        "try:\n"
        "    data = status.full_snapshot()\n"
        "except FirstmateError as exc:\n"
        "    sys.stderr.write(f'fm: {exc.message}\\n')\n"
        "    sys.exit(int(exc.exit_code))\n"
        "print(json.dumps(data, sort_keys=True) if sys.argv[1:] else status.render(data))\n")


@pytest.mark.parametrize("name", ["rows", "unusable rows", "live grant", "away on",
                                  "watcher without a beacon", "planted lock link"])
def test_the_command_prints_what_the_full_path_prints(tmp_path: Path, name: str,
                                                      procs: list[subprocess.Popen[bytes]]
                                                      ) -> None:
    home = Home(tmp_path / "home")
    STATES[name](home, procs)
    for args in ((), ("--json",)):
        got = _cli(home, *args)
        want = subprocess.run([sys.executable, "-c", FULL, *args], capture_output=True,
                              text=True, timeout=60, check=False, env=child_env(home))
        assert (got.returncode, got.stdout, got.stderr) == (
            want.returncode, want.stdout, want.stderr)


def test_a_status_call_on_a_deep_queue_imports_nothing_heavy(fm_home: Home,
                                                             procs: list[subprocess.Popen[bytes]]
                                                             ) -> None:
    rows(fm_home, 1200)
    holder(fm_home, procs)  # a live watcher: the holder is verified from /proc
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "firstmate", "status"],
                         capture_output=True, text=True, timeout=60, check=False,
                         env=child_env(fm_home))
    assert time.monotonic() - start < 60
    assert out.returncode == 0, out.stderr
    assert "queue: 1200 row(s), oldest row 1" in out.stdout
    assert "watcher: healthy pid=" in out.stdout
    names = imported_modules(out.stderr)
    assert "firstmate.fast.statusview" in names  # the measurement saw the path
    assert sorted(n for n in FORBIDDEN if n in names) == []
    assert not [n for n in names if n.startswith(("attr.", "psutil.", "pluggy.", "typing."))]


def test_a_status_call_with_a_session_record_takes_the_full_path(fm_home: Home) -> None:
    rows(fm_home, 1)
    fm_home.lock_path("session").write_text("{}")
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "firstmate", "status"],
                         capture_output=True, text=True, timeout=60, check=False,
                         env=child_env(fm_home))
    assert "firstmate.continuity.session_lock" in imported_modules(out.stderr)
    assert "queue: 1 row(s)" in out.stdout


def test_the_fast_snapshot_holds_plain_values(fm_home: Home) -> None:
    rows(fm_home, 2)
    data = statusview.snapshot({"FM_HOME": str(fm_home.root)}, lambda root: None)
    assert data is not None and data["home"] == str(fm_home.root)
    assert data["queue"] == {"depth": 2, "last_seq": 2, "oldest": {
        "seq": 1, "at": 1000.0, "kind": "signal", "key": "k0", "payload": "p0"},
        "pending": {"main": 2, "branch": 0}, "unusable": 0, "episode_state": "valid",
        "grant": None}


QUEUE_HOLDER = """
import sys
from pathlib import Path
from firstmate.store.locks import FileLock
root = Path(sys.argv[1])
lock = FileLock(root / "state" / "queue.lock", "queue", root)
lock.acquire(0)
print("ready", flush=True)
sys.stdin.read()
"""


def test_a_busy_queue_lock_leaves_the_publication_to_the_next_reader(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    home = Home(tmp_path / "home")
    _killed_watcher(home.ensure(), procs)
    env = {"FM_HOME": str(home.root)}
    before = dump(home)
    proc = python(QUEUE_HOLDER, home, str(home.root))
    procs.append(proc)
    assert read_line(proc) == "ready"
    data = statusview.snapshot(env, lambda root: None)  # waits out the bound, changes nothing
    assert data is not None and data["episode"] == "acked:downtime:g0"
    assert dump(home) == before
    finish(proc)
    data = statusview.snapshot(env, lambda root: None)
    assert data is not None and str(data["episode"]).startswith("pending:downtime:")
    with raw(home) as conn:
        assert conn.execute("SELECT value FROM kv WHERE key = 'watch.open'").fetchone() == ("",)
