"""``fm status`` with the session lock held: the memo ``fm lock acquire`` leaves lets the status
call the lock held on its attrs-free path (firstmate.fast.sessionview), and in every state the
memo does not vouch for, the full path answers. Real holder processes, real ``/proc``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from firstmate.continuity.sessionrecord import SessionRecord
from firstmate.fast import sessionview, statusview
from firstmate.store.home import Home
from firstmate.testing import read_line
from hypothesis import given
from hypothesis import strategies as st
from test_append_imports import imported_modules
from test_status_fast import FORBIDDEN
from wakeq_support import child_env, fm

#: A harness name the table knows only through FM_HARNESS_PROCESS_NAMES (no plugin).
NAME = "fmtestharness"

#: Runs as a harness (argv[0] is NAME): takes the session lock for itself, says "ready", then
#: runs fm lock release when a line says so, and waits for stdin to close. (argv[1]: the
#: interpreter, which a process named otherwise cannot find as sys.executable.)
HOLDER = """
import os, subprocess, sys
def fm(*args):
    env = {**os.environ, "FM_SESSION_HOLDER_PID": str(os.getpid())}
    return subprocess.run([sys.argv[1], "-m", "firstmate", *args], env=env,
                          capture_output=True, text=True)
done = fm("lock", "acquire")
print("ready" if done.returncode == 0 else "failed: " + done.stderr.strip(), flush=True)
for line in sys.stdin:
    done = fm("lock", "release")
    print(done.stdout.strip() or done.stderr.strip(), flush=True)
"""


def session_holder(home: Home, procs: list[subprocess.Popen[bytes]],
                   argv0: str = NAME) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([argv0, "-c", HOLDER, sys.executable], executable=sys.executable,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE,
                            env=child_env(home, FM_HARNESS_PROCESS_NAMES=NAME))
    procs.append(proc)
    assert read_line(proc) == "ready"
    return proc


def status(home: Home, *args: str, names: str = NAME) -> subprocess.CompletedProcess[str]:
    return fm(home, "status", *args, FM_HARNESS_PROCESS_NAMES=names)


def memo(home: Home) -> Path:
    return home.state / sessionview.MEMO


def fast(home: Home, monkeypatch: pytest.MonkeyPatch, names: str = NAME) -> object:
    """The fast snapshot's session lock, or None when it hands over."""
    monkeypatch.setenv("FM_HARNESS_PROCESS_NAMES", names)
    data = statusview.snapshot({"FM_HOME": str(home.root)}, lambda root: None)
    return None if data is None else data["session_lock"]


def test_a_held_lock_is_judged_from_the_memo_as_the_full_path_judges_it(
        fm_home: Home, procs: list[subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    proc = session_holder(fm_home, procs)
    record = SessionRecord.from_json(fm_home.lock_path("session").read_bytes())
    assert record is not None and record.pid == proc.pid and record.harness == NAME
    assert memo(fm_home).read_text().split()[:3] == ["v1", record.identity, NAME]
    assert fast(fm_home, monkeypatch) == {"state": "held", "pid": proc.pid}
    with_memo = status(fm_home, "--json")
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "firstmate", "status"],
                         capture_output=True, text=True, timeout=60, check=False,
                         env=child_env(fm_home, FM_HARNESS_PROCESS_NAMES=NAME))
    assert f"session lock: held (pid {proc.pid})" in out.stdout
    names = imported_modules(out.stderr)
    assert "firstmate.fast.sessionview" in names
    assert sorted(n for n in FORBIDDEN if n in names) == []
    memo(fm_home).unlink()
    assert fast(fm_home, monkeypatch) is None
    without = status(fm_home, "--json")
    assert with_memo.returncode == without.returncode == 0
    assert json.loads(with_memo.stdout) == json.loads(without.stdout)
    assert json.loads(without.stdout)["session_lock"] == {"state": "held", "pid": proc.pid}


def test_a_memo_that_does_not_vouch_for_the_holder_now_hands_the_status_over(
        fm_home: Home, procs: list[subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    proc = session_holder(fm_home, procs)
    good = memo(fm_home).read_text()
    # Another harness table (the plugin's answer could differ): the full path answers.
    assert fast(fm_home, monkeypatch, names=f"{NAME},other") is None
    assert json.loads(status(fm_home, "--json", names=f"{NAME},other").stdout)[
        "session_lock"] == {"state": "held", "pid": proc.pid}
    version, token, harness, view, key = good.split()
    planted = {
        "another process view": f"{version} {token} {harness} {'0' * 32} {key}\n",
        "another holder": f"{version} {token.replace(':', '1:', 1)} {harness} {view} {key}\n",
        "another version": f"v0 {token} {harness} {view} {key}\n",
        "garbage": "\x00\xff" * 40,
        "too long": good * 100,
    }
    for label, text in planted.items():
        memo(fm_home).write_bytes(text.encode("utf-8", "surrogateescape"))
        assert fast(fm_home, monkeypatch) is None, label
        assert json.loads(status(fm_home, "--json").stdout)["session_lock"] == {
            "state": "held", "pid": proc.pid}, label
    copy = fm_home.root / "elsewhere"
    copy.write_text(good)
    memo(fm_home).unlink()
    memo(fm_home).symlink_to(copy)
    assert fast(fm_home, monkeypatch) is None
    memo(fm_home).unlink()
    os.mkfifo(memo(fm_home))
    assert fast(fm_home, monkeypatch) is None  # (opened without blocking)
    memo(fm_home).unlink()
    memo(fm_home).write_text(good)
    assert fast(fm_home, monkeypatch) == {"state": "held", "pid": proc.pid}


def test_a_gone_holder_and_a_rewritten_record_are_the_full_paths(
        fm_home: Home, procs: list[subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    proc = session_holder(fm_home, procs)
    record = fm_home.lock_path("session").read_text()
    for label, text in {
        "spaced": record.replace(": ", ":  ", 1),
        "a time JSON would not read": record.replace('"acquired_at": ', '"acquired_at": 1_0', 1),
        "another version": record.replace('"version": 1', '"version": 2'),
        "no pid in the token": record.replace(f'"pid": {proc.pid}', '"pid": 1'),
    }.items():
        fm_home.lock_path("session").write_text(text)
        assert fast(fm_home, monkeypatch) is None, label
        assert status(fm_home).returncode == 0, label
    fm_home.lock_path("session").write_text(record)
    assert fast(fm_home, monkeypatch) == {"state": "held", "pid": proc.pid}
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert fast(fm_home, monkeypatch) is None
    assert json.loads(status(fm_home, "--json").stdout)["session_lock"]["state"] == "stale"


def test_a_holder_of_no_known_harness_is_judged_without_a_memo(
        fm_home: Home, procs: list[subprocess.Popen[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    proc = session_holder(fm_home, procs, argv0="plainholder")
    record = SessionRecord.from_json(fm_home.lock_path("session").read_bytes())
    assert record is not None and record.harness == "unknown"
    assert not memo(fm_home).exists()
    assert fast(fm_home, monkeypatch) == {"state": "held", "pid": proc.pid}
    fast_out = status(fm_home, "--json")
    fm_home.lock_path("bridge-x.json").write_text("{}")  # (any bridge record: the full path)
    full_out = status(fm_home, "--json")
    assert json.loads(fast_out.stdout)["session_lock"] == json.loads(full_out.stdout)[
        "session_lock"] == {"state": "held", "pid": proc.pid}


def test_release_and_a_new_holder_replace_the_memo(
        fm_home: Home, procs: list[subprocess.Popen[bytes]]) -> None:
    proc = session_holder(fm_home, procs)
    assert memo(fm_home).exists()
    assert proc.stdin is not None
    proc.stdin.write(b"release\n")
    proc.stdin.flush()
    assert read_line(proc) == f"lock released: harness pid {proc.pid}"
    assert not memo(fm_home).exists() and not fm_home.lock_path("session").exists()
    other = session_holder(fm_home, procs)
    record = SessionRecord.from_json(fm_home.lock_path("session").read_bytes())
    assert record is not None and record.pid == other.pid
    assert memo(fm_home).read_text().split()[1] == record.identity


@given(st.integers(0, 2**31), st.floats(0, 2e9), st.text(min_size=0, max_size=12),
       st.one_of(st.none(), st.text(max_size=12)), st.text("0123456789abcdef", min_size=8,
                                                            max_size=20))
def test_a_record_is_read_as_the_lock_reads_it_or_handed_over(
        pid: int, at: float, harness: str, session: str | None, digest: str) -> None:
    identity = f"{pid}:{at:.2f}:{digest}"
    record = SessionRecord(pid=pid, identity=identity, harness=harness, acquired_at=at,
                           session_id=session)
    data = record.to_json().encode()
    read = SessionRecord.from_json(data)
    mine = sessionview.parse_record(data)
    if mine is not None:
        assert read is not None and (read.pid, read.identity, read.harness) == mine
    elif read is not None and read.pid > 0 and harness.isascii() and harness.isprintable() \
            and '"' not in harness and "\\" not in harness and (
                session is None or (session.isascii() and '"' not in session)):
        pytest.fail(f"a record the lock reads was not read: {data!r}")
