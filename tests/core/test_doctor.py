"""``fm doctor``: a read-only explanation of what is missing or broken, with real homes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import firstmate
from firstmate.continuity.session_lock import SessionRecord, record_path
from firstmate.store.home import Home
from firstmate.store.identity import ProcessIdentity
from firstmate.testing import fm_command

#: Where this firstmate is imported from, so children run it even with cwd elsewhere.
SOURCE = str(Path(firstmate.__file__).resolve().parents[1])


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env["FM_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join([SOURCE, *filter(None, env.get("PYTHONPATH", "").split(
        os.pathsep))])
    return env


def _doctor(home: Path, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = _env(home)
    return subprocess.run(fm_command("doctor", *args), capture_output=True, text=True,
                          timeout=120, check=False, cwd=project, env=env)


def _findings(home: Path, project: Path) -> tuple[int, list[dict[str, Any]]]:
    out = _doctor(home, project, "--json")
    assert "Traceback" not in out.stderr, out.stderr
    assert out.stdout.count("\n") == 1
    whole = json.loads(out.stdout)
    assert set(whole) == {"findings", "failed"}
    data = whole["findings"]
    assert whole["failed"] is (out.returncode == 1)
    for item in data:
        assert set(item) == {"check", "status", "detail", "fix", "safe"}
        assert item["status"] in ("ok", "warn", "fail")
        assert "fm arm" not in item["fix"].replace("fm arm --stop", "")  # (it returns)
    return out.returncode, data


def _by_check(data: list[dict[str, Any]], check: str) -> list[dict[str, Any]]:
    return [item for item in data if item["check"] == check]


def _tree(root: Path) -> dict[str, bytes]:
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_empty_home_is_reported_and_nothing_is_created(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    rc, data = _findings(home, project)
    assert rc == 0
    assert not home.exists()
    assert list(project.iterdir()) == []
    checks = [item["check"] for item in data]
    # The report order is fixed: plugins, configs, lock, watcher, queue, cycles.
    order = ["home", "plugins", "session-lock", "watcher", "queue", "episode", "cycles"]
    assert [c for c in checks if c in order] == order
    # Nothing needs a watcher yet: no advice to start one.
    watcher = _by_check(data, "watcher")[0]
    assert (watcher["status"], watcher["fix"]) == ("ok", "") and "nothing needs" in \
        watcher["detail"]
    assert _by_check(data, "queue")[0]["status"] == "ok"
    # Harnesses this project never set up are no warnings: at most one line lists them.
    configs = _by_check(data, "harness-config")
    assert all(item["status"] == "ok" for item in configs) and len(configs) <= 1, configs


def _add_crew(home: Path, name: str = "alpha") -> None:
    done = subprocess.run(fm_command("crew", "add", name, "--pane", "%1"), capture_output=True,
                          text=True, timeout=60, check=False, env=_env(home))
    assert done.returncode == 0, done.stderr


def test_a_needed_watcher_is_advised_with_a_command_that_returns(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    _add_crew(home)
    out = _doctor(home, project)
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if line.split()[1:2] == ["watcher"])
    # No harness is set up here: never `fm arm` (it holds a shell until the next wake, and a
    # harness's model is told never to run it); the shell command it names returns.
    assert "no watcher is running for 1 crew(s)" in line and "fm arm" not in line
    assert "fm install <harness>" in line and "fm checkpoint --seconds 60" in line
    quiet = subprocess.run(fm_command("checkpoint", "--seconds", "1"), capture_output=True,
                           text=True, timeout=60, check=False, env=_env(home), cwd=project)
    assert quiet.returncode == 124, quiet.stderr


def test_queued_row_without_watcher_fails_with_advice_that_fits_a_person(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    env = _env(home)
    append = subprocess.run(fm_command("wake", "append", "signal", "k1", "hello"),
                            capture_output=True, text=True, timeout=60, check=False, env=env)
    assert append.returncode == 0, append.stderr
    before = _tree(home)
    rc, data = _findings(home, project)
    assert rc == 1
    queue = _by_check(data, "queue")[0]
    assert queue["status"] == "fail"
    assert "1 row(s) queued" in queue["detail"]
    # A drain from a shell would count as seen and never wake the primary for the row.
    assert "fm wake drain" not in queue["fix"] and "fm arm" not in queue["fix"]
    assert "fm install <harness>" in queue["fix"]
    # The row is still there: the doctor reads only.
    assert _tree(home).keys() >= {k for k in before if not k.endswith(("-wal", "-shm"))}
    rc2, data2 = _findings(home, project)
    assert rc2 == 1 and "1 row(s) queued" in _by_check(data2, "queue")[0]["detail"]


def test_a_stale_session_lock_is_said_to_be_taken_over(tmp_path: Path) -> None:
    home_root, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    home = Home(home_root).ensure()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    token = ProcessIdentity(pid=gone.pid, started=1000.0, cmd_hash="ab" * 8).token()
    record = SessionRecord(pid=gone.pid, identity=token, harness="claude", acquired_at=1.0)
    record_path(home).write_text(record.to_json())
    before = record_path(home).read_bytes()
    rc, data = _findings(home_root, project)
    lock = _by_check(data, "session-lock")[0]
    # `fm lock acquire` from a shell finds no harness above it: the next session of the
    # harness takes a stale lock over, so there is nothing to do.
    assert (lock["status"], lock["fix"]) == ("ok", "")
    assert "stale" in lock["detail"] and str(gone.pid) in lock["detail"]
    assert "the next claude session takes it over" in lock["detail"]
    assert rc == 0
    assert record_path(home).read_bytes() == before


def test_corrupt_database_is_one_failure_without_traceback(tmp_path: Path) -> None:
    home_root, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    home = Home(home_root).ensure()
    garbage = b"this is not a sqlite database\x00" * 64
    home.db.write_bytes(garbage)
    out = _doctor(home_root, project, "--json")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout
    data = json.loads(out.stdout)["findings"]
    failures = [item for item in data if item["status"] == "fail"]
    assert len(failures) == 1, failures
    assert failures[0]["check"] == "queue"
    assert str(home.db) in failures[0]["fix"]
    assert home.db.read_bytes() == garbage
    text = _doctor(home_root, project)
    assert text.returncode == 1 and "Traceback" not in text.stderr
    # The fix, followed as printed in a shell, keeps the bytes aside and leaves a usable home.
    subprocess.run(["/bin/sh", "-c", failures[0]["fix"]], cwd=project, check=True,
                   timeout=120)
    assert Path(f"{home.db}.broken").read_bytes() == garbage
    rc, data = _findings(home_root, project)
    assert rc == 0 and _by_check(data, "queue")[0]["status"] == "ok"
    assert subprocess.run(fm_command("status"), env=_env(home_root), cwd=project,
                          capture_output=True, timeout=120, check=False).returncode == 0


def test_bad_argument_is_a_usage_error(tmp_path: Path) -> None:
    out = _doctor(tmp_path / "home", tmp_path, "--bogus")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_last_cycle_reasons_are_reported_and_a_bad_one_warns(tmp_path: Path) -> None:
    from firstmate.store import cyclelog

    home_root, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    home = Home(home_root).ensure()
    reasons = ["actionable-signal"] * 5 + ["actionable-check", "nonzero-exit"]
    for n, reason in enumerate(reasons):
        cyclelog.append(home, cyclelog.CycleRow(
            arm_pid=100 + n, arm_identity="unknown", watcher_pid=None, origin="started",
            started_at=1.0, ended_at=2.0, exit_code=1, signal="none", reason=reason,
            beacon_age=cyclelog.NO_BEACON))
    rc, data = _findings(home_root, project)
    cycles = _by_check(data, "cycles")[0]
    # Nothing needs a watcher: the bad cycle is history.
    assert cycles["status"] == "ok" and "nothing needs a watcher now" in cycles["detail"]
    # Only the last five reasons, oldest first.
    assert "actionable-signal, actionable-signal, actionable-signal, actionable-check, " \
           "nonzero-exit" in cycles["detail"]
    assert rc == 0
    _add_crew(home_root)
    rc, data = _findings(home_root, project)
    cycles, watcher = _by_check(data, "cycles")[0], _by_check(data, "watcher")[0]
    # Why it is down, once; what brings it back is the watcher's finding, said once.
    assert cycles["status"] == "warn" and cycles["fix"] == ""
    assert "the newest cycle ended with nonzero-exit" in cycles["detail"]
    assert watcher["status"] == "warn" and watcher["fix"]
