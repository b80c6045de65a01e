"""Hostile input and hostile state: each edge ends in one line and a documented exit status,
and nothing is lost (one regression test per case found against the previous main)."""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from firstmate.plugin.configfiles import ConfigFileError, read_config, update_json
from firstmate.store import crew
from firstmate.store.home import Home
from firstmate.testing import read_line
from wakeq_support import child_env, fm, rows

DEADLINE = 60.0


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "internal error" not in lines[0] and "Traceback" not in done.stderr
    return lines[0]


# --- 1. a status write cut short ------------------------------------------------------------


def _limited(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_status_write_cut_short_is_rolled_back_and_the_next_line_stands_alone(
    fm_home: Home,
) -> None:
    assert fm(fm_home, "crew", "add", "c1", "--pane", "%1").returncode == 0
    assert fm(fm_home, "crew", "status", "c1", "working: first").returncode == 0
    log = crew.path(fm_home, "c1", crew.STATUS)
    before = log.read_bytes()
    # The file-size limit lets 10 more bytes through: the write is cut short.
    done = subprocess.run(
        [sys.executable, "-m", "firstmate", "crew", "status", "c1",
         "needs-decision: key=db " + "x" * 200], capture_output=True, text=True,
        env=child_env(fm_home), timeout=DEADLINE, check=False,
        preexec_fn=lambda: _limited(len(before) + 10))
    assert done.returncode == 4
    assert "nothing was recorded" in one_line(done)
    assert log.read_bytes() == before  # whole or absent: rolled back
    # A torn line left by something else is never glued to the next report.
    with log.open("ab") as fh:
        fh.write(b"1700000000.000\tworking: torn")
    assert fm(fm_home, "crew", "status", "c1", "needs-decision: key=db pick one").returncode == 0
    assert log.read_bytes().endswith(b"working: torn\n" + log.read_bytes().splitlines()[-1] + b"\n")
    answered = fm(fm_home, "crew", "answer", "c1", "--key", "db", "postgres")
    assert answered.returncode == 0, answered.stderr


# --- 2. out-of-range sequences on import ----------------------------------------------------


def test_migrate_refuses_out_of_range_sequences_and_appends_keep_working(
    fm_home: Home, tmp_path: Path,
) -> None:
    legacy = tmp_path / "legacy" / "state"
    legacy.mkdir(parents=True)
    (legacy / ".wake-queue").write_bytes(
        b"1700000000\t9223372036854775807\tsignal\tk\tsignal: huge\n"
        b"1700000001\t4\tsignal\tk2\tsignal: fine\n")
    (legacy / ".wake-queue.seq").write_text("9" * 400 + "\n")
    done = fm(fm_home, "migrate", "--from-legacy", str(legacy.parent))
    assert done.returncode == 0, done.stderr
    assert "ignored the legacy sequence counter" in done.stdout
    assert "9223372036854775807" in done.stdout  # the refused row is reported verbatim
    assert [r[0] for r in rows(fm_home)] == [4]
    appended = fm(fm_home, "wake", "append", "check", "after", "check: after")
    assert (appended.returncode, appended.stdout) == (0, "5\n")


# --- 3. the database replaced under a running watcher ---------------------------------------


def test_a_watcher_whose_database_was_replaced_ends_with_a_failed_line(fm_home: Home) -> None:
    env = child_env(fm_home, FM_TMUX="/nonexistent/tmux", FM_SIGNAL_GRACE="0",
                    FIRSTMATE_PLUGINS="none")
    arm = subprocess.Popen([sys.executable, "-m", "firstmate", "arm"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, env=env)
    try:
        assert read_line(arm, DEADLINE).startswith("watcher: started")
        fm_home.db.unlink()
        # The next append creates a new database and rings the doorbell.
        assert fm(fm_home, "wake", "append", "check", "k", "check: lost?").returncode == 0
        line = read_line(arm, DEADLINE)
        assert line.startswith("watcher: FAILED - ") and "removed or replaced" in line
        assert arm.wait(DEADLINE) != 0
    finally:
        if arm.poll() is None:
            arm.kill()
            arm.wait()
    # Nothing is lost: the row waits in the current database for the next watcher.
    assert [r[3] for r in rows(fm_home)] == ["check: lost?"]


# --- 5. text that is not UTF-8 ----------------------------------------------------------------


def test_status_and_answers_with_bytes_that_are_not_utf8_are_recorded(fm_home: Home) -> None:
    assert fm(fm_home, "crew", "add", "c1", "--pane", "%1").returncode == 0
    argv = [os.fsencode(sys.executable), b"-m", b"firstmate", b"crew", b"status", b"c1",
            b"needs-decision: key=k caf\xe9"]
    done = subprocess.run(argv, capture_output=True, env=child_env(fm_home), timeout=DEADLINE,
                          check=False)
    assert done.returncode == 0, done.stderr
    last = crew.last_line(fm_home, "c1")
    assert last is not None and last.text == "needs-decision: key=k caf\ufffd"
    argv = [os.fsencode(sys.executable), b"-m", b"firstmate", b"crew", b"answer", b"c1",
            b"--key", b"k", b"na\xefve"]
    done = subprocess.run(argv, capture_output=True, env=child_env(fm_home), timeout=DEADLINE,
                          check=False)
    assert done.returncode == 0, done.stderr
    log = crew.path(fm_home, "c1", crew.STATUS).read_text()
    assert log.splitlines()[-1].endswith("\tanswered: key=k na\ufffdve")


# --- 7. config paths of every type ------------------------------------------------------------


def test_config_reads_refuse_fifos_devices_and_links_to_nothing(tmp_path: Path) -> None:
    fifo = tmp_path / "settings.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigFileError, match="not a regular file"):
        read_config(fifo)  # (returns at once: never waits for a writer)
    fifo.unlink()
    fifo.symlink_to("/dev/zero")
    with pytest.raises(ConfigFileError, match="not a regular file"):
        update_json(fifo, lambda d: d, remove_ours=lambda d: d)
    fifo.unlink()
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(ConfigFileError, match="is a directory"):
        read_config(tmp_path / "dir.json")
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "elsewhere" / "deep" / "settings.json")
    with pytest.raises(ConfigFileError, match="does not exist"):
        update_json(dangling, lambda d: {**d, "x": 1}, remove_ours=lambda d: d)
    assert not (tmp_path / "elsewhere").exists()  # no directories made at the target
    huge = tmp_path / "huge.json"
    with huge.open("wb") as fh:
        fh.truncate(9 * 1024 * 1024)
    with pytest.raises(ConfigFileError, match="too large"):
        read_config(huge)


def test_a_read_only_config_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text('{"mine": true}\n')
    path.chmod(0o444)
    with pytest.raises(ConfigFileError, match="read-only"):
        update_json(path, lambda d: {**d, "hooks": {}}, remove_ours=lambda d: d)
    with pytest.raises(ConfigFileError, match="read-only"):
        update_json(path, lambda d: {**d, "hooks": {}}, remove_ours=lambda d: d, dry_run=True)
    assert path.read_text() == '{"mine": true}\n'


# --- 8. raw OS errors ------------------------------------------------------------------------


@pytest.mark.parametrize("args", [("crew", "add", "c1", "--pane", "%1"),
                                  ("wake", "append", "check", "k", "check: x"),
                                  ("arm",), ("status",), ("check", "list")])
@pytest.mark.parametrize("where", ["file", "below-file"])
def test_a_home_at_or_below_a_regular_file_is_one_line(
    tmp_path: Path, args: tuple[str, ...], where: str,
) -> None:
    plain = tmp_path / "plain"
    plain.write_text("not a home\n")
    home = plain if where == "file" else plain / "home"
    env = {**child_env(Home(home)), "FM_TMUX": "/nonexistent/tmux"}
    done = subprocess.run([sys.executable, "-m", "firstmate", *args], capture_output=True,
                          text=True, env=env, timeout=DEADLINE, check=False)
    assert done.returncode == 4, (done.stdout, done.stderr)
    assert str(plain) in one_line(done)
    assert plain.read_text() == "not a home\n"


def test_a_write_refused_by_the_file_size_limit_is_one_line(fm_home: Home) -> None:
    # (A tiny tmpfs would say ENOSPC; the file-size limit refuses the same writes unprivileged.)
    for args in (("check", "add", "disk", "--", "df", "-h"), ("host", "enable")):
        done = subprocess.run([sys.executable, "-m", "firstmate", *args], capture_output=True,
                              text=True, env=child_env(fm_home), timeout=DEADLINE, check=False,
                              preexec_fn=lambda: _limited(0))
        assert done.returncode == 4, (args, done.stderr)
        assert "cannot write" in one_line(done)


# --- 9. a committed append with nowhere to say so -------------------------------------------


@pytest.mark.parametrize("stdout", ["closed", "full"])
def test_a_committed_append_exits_0_when_stdout_is_closed_or_full(fm_home: Home,
                                                                  stdout: str) -> None:
    argv = [sys.executable, "-m", "firstmate", "wake", "append", "check", "k", "check: once"]
    if stdout == "closed":
        done = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *argv],
                              env=child_env(fm_home), timeout=DEADLINE, check=False,
                              capture_output=False, stderr=subprocess.PIPE)
    else:
        with open("/dev/full", "w") as full:
            done = subprocess.run(argv, env=child_env(fm_home), timeout=DEADLINE, check=False,
                                  stdout=full, stderr=subprocess.PIPE)
    assert done.returncode == 0, done.stderr
    assert [r[3] for r in rows(fm_home)] == ["check: once"]


# --- 10. names that reach a terminal or a model ----------------------------------------------


def test_hostile_check_file_names_never_reach_the_terminal_raw(fm_home: Home) -> None:
    checks_dir = fm_home.state / "checks"
    checks_dir.mkdir(exist_ok=True)
    (checks_dir / "evil\x1b]0;pwned\x07\x1b[2J.json").write_text("{}")
    listed = fm(fm_home, "check", "list")
    assert listed.returncode == 0 and "\x1b" not in listed.stdout and "\x07" not in listed.stdout
    assert "REJECTED" in listed.stdout
    env = child_env(fm_home, FM_TMUX="/nonexistent/tmux", FM_SIGNAL_GRACE="0",
                    FIRSTMATE_PLUGINS="none")
    arm = subprocess.run([sys.executable, "-m", "firstmate", "arm"], capture_output=True,
                         text=True, env=env, timeout=DEADLINE, check=False)
    reason = arm.stdout.splitlines()[-1]
    assert reason.startswith("check: rejected unauthenticated state checks: evil")
    assert "\x1b" not in arm.stdout and "\x07" not in arm.stdout


# --- 12. an empty database -------------------------------------------------------------------


def test_an_empty_database_is_refused_not_reinitialised(fm_home: Home) -> None:
    assert fm(fm_home, "wake", "append", "check", "k", "check: one").stdout == "1\n"
    fm_home.db.write_bytes(b"")
    for suffix in ("-wal", "-shm"):
        Path(f"{fm_home.db}{suffix}").unlink(missing_ok=True)
    for args in (("wake", "append", "check", "k", "check: two"), ("status",), ("wake", "drain")):
        done = fm(fm_home, *args)
        assert done.returncode == 4, (args, done.stdout, done.stderr)
        assert f"mv {fm_home.db} {fm_home.db}.empty" in one_line(done)
    assert fm_home.db.stat().st_size == 0
    # The repair the message names works.
    os.rename(fm_home.db, f"{fm_home.db}.empty")
    assert fm(fm_home, "wake", "append", "check", "k", "check: fresh").returncode == 0
    with sqlite3.connect(fm_home.db) as conn:
        assert conn.execute("SELECT count(*) FROM wakes").fetchone() == (1,)


def test_a_new_database_is_never_visible_half_made(fm_home: Home) -> None:
    # Many first appends race to create the database: all succeed, every sequence is unique.
    fm_home.db.unlink(missing_ok=True)
    procs = [subprocess.Popen([sys.executable, "-m", "firstmate", "wake", "append", "check",
                               f"k{i}", f"check: {i}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=child_env(fm_home))
             for i in range(6)]
    outs = [p.communicate(timeout=DEADLINE) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [o[1] for o in outs]
    assert sorted(int(o[0]) for o in outs) == [1, 2, 3, 4, 5, 6]
    assert not [p for p in fm_home.state.iterdir() if ".new." in p.name]


def test_json_outputs_stay_parseable_with_hostile_state(fm_home: Home) -> None:
    assert fm(fm_home, "crew", "add", "c1", "--pane", "%1").returncode == 0
    assert fm(fm_home, "crew", "status", "c1", "done: \x1b[31mred\x1b[0m").returncode == 0
    status = fm(fm_home, "status", "--json")
    assert status.returncode == 0
    assert "\x1b" not in json.dumps(json.loads(status.stdout))
