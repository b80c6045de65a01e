"""Registered checks: hash-bound definitions, real process groups, timeouts and interruption."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
from firstmate.base import keyring
from firstmate.base.errors import ConflictError, UsageError
from firstmate.store import checks
from firstmate.store.home import Home
from firstmate.testing.procs import eventually
from firstmate.watch.sources.base import PollContext, Source, Wake
from firstmate.watch.sources.checks import ChecksSource

CORE = str(Path(__file__).resolve().parents[2] / "core")
DEADLINE = 20.0
T0 = 1_700_000_000.0


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home").ensure()


def ctx(home: Home, now: float, triage: list[str] | None = None, **env: str) -> PollContext:
    log = triage if triage is not None else []
    return PollContext(home=home, env={**os.environ, **env}, now=now, poll=1, triage=log.append)


def sh(script: str) -> list[str]:
    return ["sh", "-c", script]


def runs(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def wait_for_file(path: Path) -> str:
    return eventually(f"{path} to appear",
                      lambda: path.read_text().strip() if path.exists() else "", DEADLINE,
                      interval=0.01)


def gone(pid: int) -> bool:
    """The process no longer runs (a zombie waiting for an indifferent init counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pid: int) -> None:
    eventually(f"pid {pid} to end", lambda: gone(pid), DEADLINE, interval=0.02)


def test_it_is_a_source() -> None:
    assert isinstance(ChecksSource(Home(Path("/nonexistent"))), Source)


# --- definitions ---------------------------------------------------------------------------


def test_add_stores_an_authenticated_private_definition(home: Home, tmp_path: Path) -> None:
    definition = checks.add(home, "disk", ["df", "-h", "/"], cwd=str(tmp_path))
    valid, rejected = checks.load(home)
    assert valid == [definition] and rejected == []
    assert definition.argv == ("df", "-h", "/") and definition.cwd == str(tmp_path)
    secret = Path(keyring.key_file(str(home.root), os.environ))
    assert not secret.is_relative_to(home.root)  # the secret never lives in the home
    for p in (checks.definition_path(home, "disk"), secret):
        assert p.stat().st_mode & 0o777 == 0o600
    assert secret.parent.stat().st_mode & 0o777 == 0o700
    with pytest.raises(ConflictError, match="--replace"):
        checks.add(home, "disk", ["true"])
    checks.add(home, "disk", ["true"], replace=True)
    assert checks.load(home)[0][0].argv == ("true",)


def test_a_hand_edited_or_foreign_definition_is_rejected(home: Home, tmp_path: Path) -> None:
    checks.add(home, "disk", ["df"])
    checks.add(home, "ok", ["true"])
    path = checks.definition_path(home, "disk")
    record = json.loads(path.read_text())
    record["argv"] = ["rm", "-rf", "/"]
    path.write_text(json.dumps(record))
    (checks.checks_dir(home) / "dropped.json").write_text('{"name": "dropped", "argv": ["x"]}')
    (checks.checks_dir(home) / "script.sh").write_text("#!/bin/sh\n")
    other = Home(tmp_path / "other").ensure()
    checks.add(other, "copied", ["true"])
    (checks.checks_dir(home) / "copied.json").write_bytes(checks.definition_path(other, "copied").read_bytes())
    valid, rejected = checks.load(home)
    assert [d.name for d in valid] == ["ok"]
    assert {r.name: r.why for r in rejected} == {
        "copied": "definition hash does not match",
        "disk": "definition hash does not match",
        "dropped": "definition hash does not match",
        "script.sh": "not a definition file",
    }


def test_without_the_home_secret_every_definition_is_rejected(home: Home) -> None:
    checks.add(home, "a", ["true"])
    os.unlink(keyring.key_file(str(home.root), os.environ))
    valid, rejected = checks.load(home)
    assert valid == [] and [r.name for r in rejected] == ["a"]


def test_a_symlinked_definition_is_rejected_not_followed(home: Home, tmp_path: Path) -> None:
    checks.add(home, "a", ["true"])
    (tmp_path / "real.json").write_bytes(checks.definition_path(home, "a").read_bytes())
    (checks.checks_dir(home) / "b.json").symlink_to(tmp_path / "real.json")
    _, rejected = checks.load(home)
    assert [(r.name, r.why) for r in rejected] == [("b", "symlink")]


@pytest.mark.parametrize("name", ["", ".x", "a/b", "a b", "x" * 65])
def test_bad_check_names(home: Home, name: str) -> None:
    with pytest.raises(UsageError, match="invalid check name"):
        checks.add(home, name, ["true"])


def test_an_empty_command_is_refused(home: Home) -> None:
    with pytest.raises(UsageError, match="missing command"):
        checks.add(home, "a", [])


# --- the run contract ------------------------------------------------------------------------


def result_of(home: Home, argv: list[str], timeout: float = 30, name: str = "c") -> checks.CheckResult:
    definition = checks.add(home, name, argv, replace=True)
    return checks.run_check(definition, timeout, dict(os.environ), home)


def test_quiet_success_has_nothing_to_report(home: Home) -> None:
    result = result_of(home, sh("exit 0"))
    assert result.outcome == "ok" and result.reason is None


def test_output_is_reported_by_its_first_line(home: Home) -> None:
    result = result_of(home, sh("echo; echo '  disk 91% full\x1b[0m'; echo more"), name="disk")
    assert result.reason == "check: disk: disk 91% full"


def test_a_failure_names_its_exit_status_and_first_line(home: Home) -> None:
    assert result_of(home, sh("echo boom >&2; exit 3")).reason == "check: c: failed (exit 3): boom"
    assert result_of(home, sh("exit 4")).reason == "check: c: failed (exit 4)"
    assert result_of(home, sh("kill -9 $$")).reason == "check: c: failed (signal SIGKILL)"


def test_a_command_that_cannot_start(home: Home) -> None:
    result = result_of(home, ["/nonexistent/check"])
    assert result.outcome == "error"
    assert result.reason == "check: c: could not start: No such file or directory"


def test_the_check_knows_its_name_and_home(home: Home) -> None:
    result = result_of(home, sh('echo "$FM_CHECK_NAME $FM_HOME"'), name="who")
    assert result.reason == f"check: who: who {home.root}"


def test_huge_output_is_bounded(home: Home) -> None:
    result = result_of(home, sh("yes | head -c 20000000"))
    assert result.reason == "check: c: y"


def test_a_hanging_check_and_its_grandchild_are_killed_at_the_timeout(home: Home, tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    script = f"sleep 100000 & echo $! > {shlex.quote(str(pidfile))}; wait"
    result = result_of(home, sh(script), timeout=1, name="hang")
    assert result.outcome == "timeout"
    assert result.reason == "check: hang: timed out after 1s"
    wait_gone(int(pidfile.read_text()))
    assert checks.running_groups() == []


def test_a_grandchild_ignoring_term_is_killed_too(home: Home, tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    script = f"trap '' TERM; sleep 100000 & echo $! > {shlex.quote(str(pidfile))}; wait"
    result = result_of(home, sh(script), timeout=1)
    assert result.outcome == "timeout"
    wait_gone(int(pidfile.read_text()))


def test_leftovers_of_a_finished_check_are_killed(home: Home) -> None:
    # The leader exits at once, leaving a background child that still holds the stdout pipe.
    result = result_of(home, sh("sleep 100000 & echo $!"))
    assert result.outcome == "report"
    wait_gone(int(result.detail))


def test_kill_running_interrupts_a_check_in_flight(home: Home, tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    definition = checks.add(home, "hang", sh(f"sleep 100000 & echo $! > {shlex.quote(str(pidfile))}; wait"))
    box: list[checks.CheckResult] = []
    worker = threading.Thread(target=lambda: box.append(checks.run_check(definition, 600, dict(os.environ))))
    worker.start()
    grandchild = int(wait_for_file(pidfile))
    # The thread registers the group just after the fork.
    eventually("the check's process group", checks.running_groups, DEADLINE, interval=0.01)
    assert len(checks.running_groups()) == 1
    assert checks.kill_running() == checks.running_groups()
    worker.join(DEADLINE)
    assert not worker.is_alive()
    assert box[0].reason == "check: hang: failed (signal SIGKILL)"
    wait_gone(grandchild)
    assert checks.running_groups() == []


def test_a_signal_landing_while_a_check_is_forked_still_finds_its_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    # A check forked but not yet registered (the handler ran inside Popen): only the scan of
    # this process's session-leading children can find it.
    leader = subprocess.Popen(sh(f"sleep 100000 & echo $! > {shlex.quote(str(pidfile))}; wait"),
                              start_new_session=True)
    grandchild = int(wait_for_file(pidfile))
    checks._SPAWNING = True
    try:
        assert leader.pid in checks.kill_running()
    finally:
        checks._SPAWNING = False
    assert leader.wait(DEADLINE) == -signal.SIGKILL
    wait_gone(grandchild)


WATCHER = """
import os, signal, sys
from pathlib import Path
from firstmate.store import checks
from firstmate.base import keyring
from firstmate.store.home import Home

def cleanup(signum, frame):
    checks.kill_running()
    sys.exit(128 + signum)

signal.signal(signal.SIGTERM, cleanup)
home = Home(Path(sys.argv[1]))
(definition,), _ = checks.load(home)
print("running", flush=True)
checks.run_check(definition, 600, os.environ, home)
print("finished", flush=True)
"""


def test_term_to_the_watcher_kills_the_running_check_group(home: Home, tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    checks.add(home, "hang", sh(f"sleep 100000 & echo $! > {shlex.quote(str(pidfile))}; wait"))
    watcher = subprocess.Popen([sys.executable, "-c", WATCHER, str(home.root)], stdout=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONPATH": CORE})
    assert watcher.stdout is not None and watcher.stdout.readline().strip() == "running"
    grandchild = int(wait_for_file(pidfile))
    check_leader = next(p for p in psutil.Process(watcher.pid).children() if p.name() == "sh")
    watcher.send_signal(signal.SIGTERM)
    assert watcher.wait(DEADLINE) == 128 + signal.SIGTERM
    wait_gone(grandchild)
    wait_gone(check_leader.pid)


# --- the source ------------------------------------------------------------------------------


def fire(source: ChecksSource, home: Home, now: float, triage: list[str] | None = None,
         **env: str) -> Wake | None:
    c = ctx(home, now, triage, **env)
    wake = source.poll(c)
    if wake is not None:
        source.commit(wake, c)
    return wake


def test_quiet_checks_run_every_interval_and_are_logged(home: Home, tmp_path: Path) -> None:
    counter = tmp_path / "count"
    checks.add(home, "quiet", sh(f"echo x >> {shlex.quote(str(counter))}"))
    source = ChecksSource(home)
    triage: list[str] = []
    assert fire(source, home, T0, triage) is None
    assert runs(counter) == 1 and triage == ["check ok: quiet"]
    assert source.next_due(ctx(home, T0)) == pytest.approx(T0 + 300)
    assert fire(source, home, T0 + 299) is None
    assert runs(counter) == 1
    assert fire(ChecksSource(home), home, T0 + 300) is None  # the cadence survives a new watcher
    assert runs(counter) == 2
    assert fire(source, home, T0 + 360, FM_CHECK_INTERVAL="60") is None
    assert runs(counter) == 3


def test_a_report_wakes_and_is_recorded_only_once_durable(home: Home, tmp_path: Path) -> None:
    counter = tmp_path / "count"
    checks.add(home, "disk", sh(f"echo x >> {shlex.quote(str(counter))}; echo 'disk 91% full'"))
    source = ChecksSource(home)
    wake = source.poll(ctx(home, T0))
    assert wake == Wake("check", "check:disk", "check: disk: disk 91% full")
    # Not committed (the row never became durable): the next watcher runs it again.
    again = ChecksSource(home)
    assert again.poll(ctx(home, T0 + 1)) == wake
    again.commit(wake, ctx(home, T0 + 1))
    assert fire(ChecksSource(home), home, T0 + 2) is None
    assert runs(counter) == 2


def test_checks_run_in_name_order_and_the_first_report_wins(home: Home, tmp_path: Path) -> None:
    checks.add(home, "a-quiet", sh("true"))
    checks.add(home, "b-loud", sh("echo b"))
    checks.add(home, "c-loud", sh("echo c"))
    source = ChecksSource(home)
    assert fire(source, home, T0) == Wake("check", "check:b-loud", "check: b-loud: b")
    assert fire(source, home, T0 + 1) == Wake("check", "check:c-loud", "check: c-loud: c")
    assert fire(source, home, T0 + 2) is None


def test_the_timeout_comes_from_the_environment(home: Home) -> None:
    checks.add(home, "hang", sh("exec sleep 100000"))
    wake = fire(ChecksSource(home), home, T0, FM_CHECK_TIMEOUT="0.5")
    assert wake is not None and wake.reason == "check: hang: timed out after 0.5s"


def test_rejected_checks_wake_once_per_distinct_set(home: Home, tmp_path: Path) -> None:
    counter = tmp_path / "count"
    checks.add(home, "good", sh(f"echo x >> {shlex.quote(str(counter))}"))
    (checks.checks_dir(home) / "evil.json").write_text("{}")
    source = ChecksSource(home)
    wake = fire(source, home, T0)
    assert wake == Wake("check", "unauthenticated-state-checks",
                        "check: rejected unauthenticated state checks: evil")
    assert runs(counter) == 0
    # Reported: the authenticated checks run, the rejected one never does.
    assert fire(source, home, T0 + 1) is None
    assert runs(counter) == 1
    (checks.checks_dir(home) / "worse.json").write_text("[]")
    wake = fire(source, home, T0 + 2)
    assert wake is not None and wake.reason == "check: rejected unauthenticated state checks: evil, worse"
    checks.remove(home, "evil")
    checks.remove(home, "worse")
    assert fire(source, home, T0 + 3) is None
    (checks.checks_dir(home) / "evil.json").write_text("{}")
    assert fire(source, home, T0 + 4) is not None  # a recurrence is reported again


def test_a_new_check_is_due_at_once(home: Home) -> None:
    source = ChecksSource(home)
    assert fire(source, home, T0) is None
    assert source.next_due(ctx(home, T0)) is None
    checks.add(home, "new", sh("echo hello"))
    assert fire(source, home, T0 + 1) == Wake("check", "check:new", "check: new: hello")


# --- the command line ------------------------------------------------------------------------


def fm(home: Home, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(PYTHONPATH=CORE, FM_HOME=str(home.root))
    return subprocess.run([sys.executable, "-m", "firstmate", *args], capture_output=True, text=True,
                          env=env, timeout=60, check=False)


def test_cli_round_trip(home: Home) -> None:
    out = fm(home, "check", "add", "disk", "--", "sh", "-c", "echo 'disk full'")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("check: added disk: sh -c 'echo '\"'\"'disk full'\"'\"''")
    assert fm(home, "check", "run", "disk").stdout == "check: disk: disk full\n"
    (checks.checks_dir(home) / "evil.json").write_text("{}")
    listed = {e["name"]: e for e in json.loads(fm(home, "check", "list", "--json").stdout)["checks"]}
    assert listed["disk"]["status"] == "ok" and listed["disk"]["argv"] == ["sh", "-c", "echo 'disk full'"]
    assert listed["evil"]["status"] == "rejected"
    text = fm(home, "check", "list").stdout
    assert "evil\tREJECTED" in text and "fm check remove evil" in text
    assert fm(home, "check", "remove", "evil").returncode == 0
    assert fm(home, "check", "remove", "disk").stdout == "check: removed disk\n"
    assert "no checks registered" in fm(home, "check", "list").stdout


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (("check", "add", "x", "true"), 2, "the -- before the check's command is required"),
        (("check", "add", "x", "--"), 2, "missing command"),
        (("check", "add", "--"), 2, "required: NAME; run 'fm check add --help'"),
        (("check", "remove", "nope"), 2, "no check named 'nope'"),
        (("check", "frob"), 2, "invalid choice: 'frob'"),
        (("check", "add", "dup", "--", "true"), 3, "already exists"),
    ],
)
def test_cli_errors(home: Home, args: tuple[str, ...], code: int, needle: str) -> None:
    checks.add(home, "dup", ["true"])
    out = fm(home, *args)
    assert out.returncode == code, out
    assert out.stderr.startswith("fm: ") and out.stderr.count("\n") == 1 and needle in out.stderr
