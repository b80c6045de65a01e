"""The primary session lock, with real harness-shaped processes running real ``fm`` commands.

A fake harness is a python script installed as ``<tmp>/bin/claude`` (or ``codex``): run by the
interpreter, it looks to harness detection exactly like ``node …/claude``. It serves requests on
stdin, running each as its own child and answering with one JSON line, so every ``fm lock``
call below has the fake harness as its parent.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import attrs
import pytest
from firstmate.continuity import session_lock
from firstmate.continuity.session_lock import (
    DEAD,
    HarnessNotFound,
    LiveFacts,
    SessionRecord,
    blocks_reclaim,
    classify,
    inspect,
    owned_by_self,
    probe,
    read_record,
    recheck_owned,
    resolve_holder,
)
from firstmate.store.home import Home
from firstmate.store.identity import ProcessIdentity, ProcInfo, identity_of
from firstmate.testing import exec_identity, read_line
from hypothesis import given
from hypothesis import strategies as st

CORE = str(Path(__file__).resolve().parents[2] / "core")
DEADLINE = 60.0
PY = sys.executable
FM = (PY, "-m", "firstmate")
#: Environment a harness must not inherit from whatever runs the tests.
SCRUB = ("CLAUDE_CODE_SESSION_ID", "CLAUDE_PID", "FM_SESSION_HOLDER_PID")

HARNESS_SCRIPT = """\
import json, os, subprocess, sys
if sys.argv[1:2] == ["--run"]:
    env = dict(os.environ)
    if env.pop("FAKE_EXPORT_CLAUDE_PID", ""):
        env["CLAUDE_PID"] = str(os.getpid())
    sys.exit(subprocess.run(sys.argv[2:], env=env).returncode)
print(json.dumps({"pid": os.getpid()}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    env = dict(os.environ)
    env.update(req.get("env", {}))
    done = subprocess.run(req["argv"], capture_output=True, text=True, env=env, timeout=120)
    print(json.dumps({"rc": done.returncode, "out": done.stdout, "err": done.stderr}), flush=True)
"""

# Runs its arguments as a child after printing the child's pid (a non-harness link in a chain);
# with --holder it names itself as FM_SESSION_HOLDER_PID; with --orphan it first detaches
# (double fork), so the command runs with no harness anywhere above it.
RELAY_SCRIPT = """\
import os, subprocess, sys, time
args = sys.argv[1:]
env = dict(os.environ)
if args[:1] == ["--holder"]:
    args = args[1:]
    env["FM_SESSION_HOLDER_PID"] = str(os.getpid())
    print(os.getpid(), flush=True)
if args[:1] == ["--orphan"]:
    args = args[1:]
    r, w = os.pipe()
    mid = os.fork()
    if mid == 0:
        os.setsid()
        parent = os.getpid()
        if os.fork() == 0:
            os.close(w)
            while os.read(r, 1):
                pass
            deadline = time.monotonic() + 30
            while os.getppid() == parent and time.monotonic() < deadline:
                time.sleep(0.01)
            done = subprocess.run(args, env=env)
            print(f"rc={done.returncode}", flush=True)
            os._exit(0)
        os._exit(0)
    os.close(r)
    os.close(w)
    os.waitpid(mid, 0)
    sys.exit(0)
child = subprocess.Popen(args, env=env)
print(child.pid, flush=True)
sys.exit(child.wait())
"""


@attrs.frozen
class Ran:
    rc: int
    out: str
    err: str


#: The fake harnesses' names (no harness plugin is installed here: the environment names them).
HARNESS_NAMES = "claude,codex,cursor-agent,pi,omp,opencode,grok"
NAMES = {"FM_HARNESS_PROCESS_NAMES": HARNESS_NAMES}


#: A stand-in for the Claude plugin, installed as a distribution with an entry point: core
#: knows no harness, and the trusted-session tests need one that declares a session anchor.
STAND_IN = """
from firstmate import hookimpl
from firstmate.plugin.harness import HarnessInfo, SessionAnchor


class StandIn:
    @hookimpl
    def firstmate_harness_info(self):
        return HarnessInfo(name="claude", display_name="Claude", family="hook",
                           rearm_owner="hook", wake_channel="stand-in", process_names=("claude",),
                           session_anchor=SessionAnchor("CLAUDE_PID", "CLAUDE_CODE_SESSION_ID"))


plugin = StandIn()
"""


@pytest.fixture(autouse=True)
def _harnesses(monkeypatch: pytest.MonkeyPatch, fm_home: Home, tmp_path: Path) -> None:
    """In this process and its children: the fake harnesses are harnesses (by name), and a
    stand-in claude plugin declares its session anchor. (After fm_home, which clears every FM_
    variable.)"""
    from firstmate.plugin import harnessprocs

    monkeypatch.setenv("FM_HARNESS_PROCESS_NAMES", HARNESS_NAMES)
    site = tmp_path / "stand-in-site"
    site.mkdir()
    (site / "firstmate_plugin_standin_claude.py").write_text(STAND_IN)
    dist = site / "firstmate_plugin_standin_claude-0.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: firstmate-plugin-standin-claude\nVersion: 0.0.0\n")
    (dist / "entry_points.txt").write_text(
        "[firstmate.plugins]\nclaude = firstmate_plugin_standin_claude:plugin\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("FM_TEST_STAND_IN_SITE", str(site))
    monkeypatch.setattr(harnessprocs, "_TABLES", {})


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUB}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ.get("FM_TEST_STAND_IN_SITE"),
                                                      CORE]))
    env["FM_HARNESS_PROCESS_NAMES"] = HARNESS_NAMES
    env.update(extra)
    return env


class FakeHarness:
    def __init__(self, script: Path, env: Mapping[str, str]) -> None:
        self.script = script
        self.proc = subprocess.Popen(
            [PY, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(env)
        )
        self.pid: int = json.loads(read_line(self.proc, DEADLINE))["pid"]
        assert self.pid == self.proc.pid

    def send(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        assert self.proc.stdin is not None
        req = {"argv": list(argv), "env": dict(env or {})}
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()

    def receive(self) -> Ran:
        got = json.loads(read_line(self.proc, DEADLINE))
        return Ran(got["rc"], got["out"], got["err"])

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Ran:
        self.send(argv, env)
        return self.receive()

    def fm(self, *args: str, env: Mapping[str, str] | None = None) -> Ran:
        return self.run([*FM, *args], env=env)

    def py(self, code: str, env: Mapping[str, str] | None = None) -> Ran:
        return self.run([PY, "-c", code], env=env)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=DEADLINE)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def bindir(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    (path / "relay.py").write_text(RELAY_SCRIPT)
    return path


Factory = Callable[..., FakeHarness]


@pytest.fixture
def harness(bindir: Path, fm_home: Home) -> Iterator[Factory]:
    started: list[FakeHarness] = []

    def start(name: str = "claude", **env: str) -> FakeHarness:
        script = bindir / name
        if not script.exists():
            script.write_text(HARNESS_SCRIPT)
        fake = FakeHarness(script, base_env(**env))
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.kill()


def record_of(home: Home) -> SessionRecord:
    found = session_lock.read_record(home)
    assert found.record is not None, found
    return found.record


RECHECK = (
    "from firstmate.store.home import open_home; from firstmate.continuity.session_lock import recheck_owned;"
    " print(recheck_owned(open_home()))"
)


# --- acquire through a real harness chain ----------------------------------------------------


def test_acquire_records_the_harness_not_the_fm_process(harness: Factory, fm_home: Home) -> None:
    a = harness("claude")
    ran = a.fm("lock", "acquire")
    assert (ran.rc, ran.out, ran.err) == (0, f"lock acquired: harness pid {a.pid}\n", "")
    rec = record_of(fm_home)
    assert rec.pid == a.pid and rec.harness == "claude" and rec.session_id is None
    live = identity_of(a.pid)
    assert rec.process is not None and live is not None and rec.process.same_as(live)
    path = session_lock.record_path(fm_home)
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
    # The same session again: acquired, record untouched.
    again = a.fm("lock", "acquire")
    assert (again.rc, again.out) == (0, f"lock acquired: harness pid {a.pid}\n")
    assert record_of(fm_home) == rec
    assert a.fm("lock", "status").out == f"lock: held by live harness pid {a.pid}\n"
    # fm status judges the record only when there is one (it skips the import otherwise).
    assert json.loads(a.fm("status", "--json").out)["session_lock"] == {"state": "held", "pid": a.pid}


def test_live_lock_refuses_another_harness_until_its_holder_dies(harness: Factory, fm_home: Home) -> None:
    a, b = harness("claude"), harness("codex")
    assert a.fm("lock", "acquire").rc == 0
    refused = b.fm("lock", "acquire")
    assert refused.rc == 1 and refused.out == ""
    assert refused.err == (
        f"fm: another live firstmate session holds the lock (pid {a.pid}); "
        "operate read-only until resolved\n"
    )
    assert record_of(fm_home).pid == a.pid
    assert b.py(RECHECK).out == f"session lock is held by live harness pid {a.pid}; not re-arming\n"
    assert a.py(RECHECK).out == "None\n"

    a.kill()
    status = b.fm("lock", "status")
    assert (status.rc, status.out) == (0, f"lock: stale (pid {a.pid} dead or not a harness)\n")
    ins = inspect(fm_home)
    assert ins.state == "stale" and ins.owner == "dead" and ins.recoverable
    taken = b.fm("lock", "acquire")
    assert (taken.rc, taken.out) == (0, f"lock acquired: harness pid {b.pid}\n")
    assert record_of(fm_home).harness == "codex"


def test_concurrent_acquires_have_exactly_one_winner(harness: Factory, fm_home: Home) -> None:
    fakes = [harness(name) for name in ("claude", "codex", "claude", "codex")]
    for fake in fakes:
        fake.send([*FM, "lock", "acquire"])
    results = {fake.pid: fake.receive() for fake in fakes}
    winners = [pid for pid, ran in results.items() if ran.rc == 0]
    assert len(winners) == 1, results
    (winner,) = winners
    assert record_of(fm_home).pid == winner
    for pid, ran in results.items():
        if pid != winner:
            assert ran.rc == 1 and f"holds the lock (pid {winner})" in ran.err, ran


def _write_record(home: Home, **fields: object) -> None:
    session_lock.record_path(home).write_text(json.dumps(fields))


def test_reused_pid_is_reclaimable_but_a_retitled_holder_is_not(harness: Factory, fm_home: Home) -> None:
    a, b = harness("claude"), harness("codex")
    live = identity_of(a.pid)
    assert live is not None
    # Same pid, other start time: a later process that reused the pid.
    reused = ProcessIdentity(pid=a.pid, started=live.started - 1000, cmd_hash=live.cmd_hash)
    _write_record(fm_home, version=1, pid=a.pid, identity=reused.token(), harness="claude",
                  acquired_at=1.0, session_id=None)
    ins = inspect(fm_home)
    assert (ins.state, ins.owner) == ("stale", "reused")
    assert b.fm("lock", "status").out == f"lock: stale (pid {a.pid} dead or not a harness)\n"
    assert b.fm("lock", "acquire").out == f"lock acquired: harness pid {b.pid}\n"
    # Same pid and start time, other command line (node retitling itself): still the holder.
    retitled = ProcessIdentity(pid=a.pid, started=live.started, cmd_hash="0" * 16)
    _write_record(fm_home, version=1, pid=a.pid, identity=retitled.token(), harness="claude",
                  acquired_at=1.0, session_id=None)
    assert inspect(fm_home).state == "held"
    assert b.fm("lock", "acquire").rc == 1


def test_all_zero_record_is_stale_and_reclaimable(harness: Factory, fm_home: Home) -> None:
    a = harness("claude")
    _write_record(fm_home, version=1, pid=0, identity="", harness="", acquired_at=0)
    assert a.fm("lock", "status").out == "lock: stale (pid 0 dead or not a harness)\n"
    assert inspect(fm_home).owner == "zero"
    assert a.fm("lock", "acquire").out == f"lock acquired: harness pid {a.pid}\n"


@pytest.mark.parametrize(
    "content",
    [b"", b"  \n", b"{not json", b"[]", b'{"pid": 4242, "identity": "garbage", "harness": "x"}',
     b'{"pid": "12"}', b'{"version": 9, "pid": 0, "identity": "", "harness": "", "acquired_at": 0}',
     b"\xff\xfe"],
    ids=["empty", "blank", "garbled", "list", "bad-identity", "string-pid", "future", "binary"],
)
def test_unusable_record_is_unreadable_inert_and_replaced(
    harness: Factory, fm_home: Home, content: bytes
) -> None:
    a = harness("claude")
    session_lock.record_path(fm_home).write_bytes(content)
    ins = inspect(fm_home)
    assert ins.state == "unreadable" and ins.record is None
    assert not ins.recoverable  # a competing recovery hook finds nothing to reclaim
    status = a.fm("lock", "status")
    assert (status.rc, status.out) == (0, "lock: unreadable\n")
    assert a.py(RECHECK).out.startswith("session lock is unreadable;")
    refused = a.fm("lock", "release")
    assert refused.rc == 1 and refused.err.startswith("fm: session lock is unreadable")
    assert a.fm("lock", "acquire").out == f"lock acquired: harness pid {a.pid}\n"
    assert record_of(fm_home).pid == a.pid


def test_absent_record_is_free_and_inert(harness: Factory, fm_home: Home) -> None:
    a = harness("claude")
    ins = inspect(fm_home)
    assert ins.state == "free" and not ins.recoverable
    assert a.fm("lock", "status").out == "lock: free\n"
    assert json.loads(a.fm("status", "--json").out)["session_lock"] == {"state": "free", "pid": None}
    assert a.py(RECHECK).out.startswith("session lock is free;")
    assert a.fm("lock", "release").out == "lock: free (nothing to release)\n"


def test_symlinked_record_is_refused_never_followed(
    harness: Factory, fm_home: Home, tmp_path: Path
) -> None:
    a = harness("claude")
    target = tmp_path / "elsewhere"
    target.write_text("precious\n")
    path = session_lock.record_path(fm_home)
    path.symlink_to(target)
    ran = a.fm("lock", "acquire")
    assert ran.rc == 4 and ran.out == ""
    assert ran.err.startswith("fm: refusing symlinked state path") and ran.err.count("\n") == 1
    assert path.is_symlink() and target.read_text() == "precious\n"
    assert a.fm("lock", "status").out == "lock: unreadable\n"
    assert "session lock: unreadable" in a.fm("status").out.splitlines()
    assert inspect(fm_home).detail.endswith("is a symlink")


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_non_regular_record_is_refused(harness: Factory, fm_home: Home, kind: str) -> None:
    a = harness("claude")
    path = session_lock.record_path(fm_home)
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    # A FIFO must not hang the reader.
    assert a.fm("lock", "status").out == "lock: unreadable\n"
    ran = a.fm("lock", "acquire")
    assert ran.rc == 4 and ran.err.startswith("fm: session lock ") and "not a regular file" in ran.err


def test_only_the_owner_releases(harness: Factory, fm_home: Home) -> None:
    a, b = harness("claude"), harness("codex")
    assert a.fm("lock", "acquire").rc == 0
    refused = b.fm("lock", "release")
    assert (refused.rc, refused.out) == (1, "")
    assert refused.err == (
        f"fm: session lock belongs to pid {a.pid}, not to this session, nothing released; "
        "leave it to that session (fm lock status says whether it is live)\n"
    )
    released = a.fm("lock", "release")
    assert (released.rc, released.out) == (0, f"lock released: harness pid {a.pid}\n")
    assert not session_lock.record_path(fm_home).exists()
    assert b.fm("lock", "status").out == "lock: free\n"


def test_status_json(harness: Factory, fm_home: Home) -> None:
    a, b = harness("claude"), harness("codex")
    free = json.loads(a.fm("lock", "status", "--json").out)
    assert free["state"] == "free" and free["record"] is None and free["line"] == "lock: free"
    assert a.fm("lock", "acquire").rc == 0
    mine = json.loads(a.fm("lock", "status", "--json").out)
    assert mine["state"] == "held" and mine["pid"] == a.pid and mine["owned_by_self"] is True
    assert mine["record"]["harness"] == "claude" and mine["recoverable"] is False
    theirs = json.loads(b.fm("lock", "status", "--json").out)
    assert theirs["owned_by_self"] is False


def test_usage_errors(harness: Factory) -> None:
    a = harness("claude")
    assert a.fm("lock").rc == 2
    bad = a.fm("lock", "grab")
    assert bad.rc == 2 and bad.err == (
        "fm: lock: argument COMMAND: invalid choice: 'grab' (choose from 'acquire', 'status', "
        "'release'); run 'fm lock --help'\n")
    assert a.fm("lock", "status", "--yaml").rc == 2
    assert a.fm("lock", "acquire", "now").rc == 2


# --- chains: contiguous runs, trusted Claude sessions, overrides, no harness ------------------


def test_contiguous_harness_run_is_anchored_at_its_outermost_process(
    harness: Factory, bindir: Path, fm_home: Home
) -> None:
    a = harness("claude")
    # claude -> claude -> fm: one session; the outer process holds the lock.
    direct = a.run([PY, str(a.script), "--run", *FM, "lock", "acquire"])
    assert direct.out == f"lock acquired: harness pid {a.pid}\n"
    assert a.fm("lock", "release").rc == 0
    # claude -> python relay -> claude -> fm: the inner claude is a separate session.
    relayed = a.run([PY, str(bindir / "relay.py"), PY, str(a.script), "--run", *FM, "lock",
                     "acquire"])
    inner = int(relayed.out.splitlines()[0])
    assert relayed.out.splitlines()[1] == f"lock acquired: harness pid {inner}"
    assert inner != a.pid


def test_a_trusted_session_anchors_on_the_harness_pid_and_records_the_id(
    harness: Factory, bindir: Path, fm_home: Home
) -> None:
    a, c = harness("claude"), harness("claude")
    trusted = {"CLAUDE_CODE_SESSION_ID": "sess-1", "CLAUDE_PID": str(a.pid)}
    # Without trust, the walk would stop at the inner claude (the relay breaks the run).
    ran = a.run([PY, str(bindir / "relay.py"), PY, str(a.script), "--run", *FM, "lock",
                 "acquire"], env=trusted)
    assert ran.out.splitlines()[1] == f"lock acquired: harness pid {a.pid}"
    rec = record_of(fm_home)
    assert (rec.pid, rec.session_id) == (a.pid, "sess-1")

    # Another process tree under the same trusted session id owns the live lock...
    same = {"CLAUDE_CODE_SESSION_ID": "sess-1", "CLAUDE_PID": str(c.pid)}
    assert c.py(RECHECK, env=same).out == "None\n"
    assert json.loads(c.fm("lock", "status", "--json", env=same).out)["owned_by_self"] is True
    # ...but a different id, or an untrusted CLAUDE_PID (not an ancestor), does not.
    other = {"CLAUDE_CODE_SESSION_ID": "sess-2", "CLAUDE_PID": str(c.pid)}
    held = f"session lock is held by live harness pid {a.pid}; not re-arming\n"
    assert c.py(RECHECK, env=other).out == held
    forged = {"CLAUDE_CODE_SESSION_ID": "sess-1", "CLAUDE_PID": str(a.pid)}
    assert c.py(RECHECK, env=forged).out == held
    # Acquire stays strict: a live holder that is not this process tree is never taken over.
    assert c.fm("lock", "acquire", env=same).rc == 1
    # Release follows ownership, so the same session may release from its new tree.
    assert c.fm("lock", "release", env=same).out == f"lock released: harness pid {a.pid}\n"


def test_untrusted_session_id_is_not_recorded(harness: Factory, fm_home: Home) -> None:
    a = harness("claude")
    # CLAUDE_PID names a process above fm that is not Claude-shaped (the test runner).
    env = {"CLAUDE_CODE_SESSION_ID": "sess-9", "CLAUDE_PID": str(os.getpid())}
    assert a.fm("lock", "acquire", env=env).out == f"lock acquired: harness pid {a.pid}\n"
    assert record_of(fm_home).session_id is None


def test_trusted_anchor_inside_the_same_run_is_the_same_session(harness: Factory,
                                                                 fm_home: Home) -> None:
    a = harness("claude")
    assert a.fm("lock", "acquire").rc == 0  # walk: anchored at a
    # claude(a) -> claude(b, exports itself as CLAUDE_PID) -> fm: b and a are one session, so
    # the record keeps naming a and takes up the now trusted session id.
    env = {"CLAUDE_CODE_SESSION_ID": "sess-3", "FAKE_EXPORT_CLAUDE_PID": "1"}
    ran = a.run([PY, str(a.script), "--run", *FM, "lock", "acquire"], env=env)
    assert (ran.rc, ran.out) == (0, f"lock acquired: harness pid {a.pid}\n")
    assert (record_of(fm_home).pid, record_of(fm_home).session_id) == (a.pid, "sess-3")
    # An untrusted acquire from the same session keeps the recorded id.
    assert a.fm("lock", "acquire").rc == 0
    assert record_of(fm_home).session_id == "sess-3"


def test_holder_override_names_an_ancestor(harness: Factory, bindir: Path, fm_home: Home) -> None:
    relay = subprocess.run([PY, str(bindir / "relay.py"), "--holder", *FM, "lock", "acquire"],
                           capture_output=True, text=True, env=base_env(), timeout=DEADLINE)
    holder = int(relay.stdout.splitlines()[0])
    assert relay.stdout.splitlines()[-1] == f"lock acquired: harness pid {holder}"
    rec = record_of(fm_home)
    assert rec.pid == holder and rec.harness == "unknown"

    a = harness("claude")
    for bad in (str(os.getpid() + 10**7), "1", "abc", str(holder)):
        ran = a.fm("lock", "acquire", env={"FM_SESSION_HOLDER_PID": bad})
        assert ran.rc == 2, bad
        assert ran.err.startswith("fm: FM_SESSION_HOLDER_PID=") and ran.err.count("\n") == 1


def test_no_harness_in_ancestry(bindir: Path, fm_home: Home) -> None:
    ran = subprocess.run([PY, str(bindir / "relay.py"), "--orphan", *FM, "lock", "acquire"],
                         capture_output=True, text=True, env=base_env(), timeout=DEADLINE)
    assert ran.stdout == "rc=1\n"
    assert ran.stderr == ("fm: cannot locate harness process in ancestry; run fm lock acquire "
                          "from inside the harness session, or set FM_SESSION_HOLDER_PID to its "
                          "pid\n")
    assert inspect(fm_home).state == "free"


def test_works_without_a_ps_binary(harness: Factory, fm_home: Home, tmp_path: Path) -> None:
    empty = tmp_path / "nobin"
    empty.mkdir()
    assert shutil.which("ps", path=str(empty)) is None
    a = harness("claude", PATH=str(empty))
    b = harness("codex", PATH=str(empty))
    assert a.fm("lock", "acquire").out == f"lock acquired: harness pid {a.pid}\n"
    assert b.fm("lock", "acquire").rc == 1
    assert b.fm("lock", "status").out == f"lock: held by live harness pid {a.pid}\n"
    a.kill()
    assert b.fm("lock", "acquire").out == f"lock acquired: harness pid {b.pid}\n"


# --- the verdicts as pure functions ----------------------------------------------------------


def _record(pid: int = 4242, started: float = 1000.0, session_id: str | None = None) -> SessionRecord:
    token = ProcessIdentity(pid=pid, started=started, cmd_hash="ab" * 8).token() if pid else ""
    return SessionRecord(pid=pid, identity=token, harness="claude" if pid else "",
                         acquired_at=1.0, session_id=session_id)


LIVE = ProcessIdentity(pid=4242, started=1000.0, cmd_hash="cd" * 8)


@pytest.mark.parametrize(
    ("record", "facts", "owner", "blocks"),
    [
        (_record(0), LiveFacts(alive=True, identity=LIVE), "zero", False),
        (_record(), DEAD, "dead", False),
        (_record(), LiveFacts(alive=True, signalable=False, identity=LIVE), "unsignalable", False),
        (_record(), LiveFacts(alive=True, identity=attrs.evolve(LIVE, started=2000.0)), "reused",
         False),
        (_record(), LiveFacts(alive=True, identity=None), "unverifiable", True),
        (_record(), LiveFacts(alive=True, identity=LIVE), "live", True),
        (_record(started=1000.004), LiveFacts(alive=True, identity=LIVE), "live", True),
    ],
    ids=["all-zero", "dead", "unsignalable", "reused", "unverifiable", "live", "rounded"],
)
def test_blocks_reclaim_verdict(
    record: SessionRecord, facts: LiveFacts, owner: str, blocks: bool
) -> None:
    assert classify(record, facts) == owner
    assert blocks_reclaim(record, facts) is blocks


def _info(pid: int, name: str, *cmdline: str) -> ProcInfo:
    return ProcInfo(pid=pid, ppid=0, name=name, cmdline=cmdline or (name,))


def test_owned_by_self_verdict() -> None:
    me = identity_of(os.getpid())
    assert me is not None
    rec = _record(pid=me.pid, started=me.started, session_id="s-1")
    fm_proc = _info(99_999_991, "python3", "python3", "-m", "firstmate")
    chain = [fm_proc, _info(me.pid, "claude")]
    facts = LiveFacts(alive=True, identity=me)
    assert owned_by_self(rec, env={}, chain=chain, facts=facts)
    # The pid is an ancestor but another process now: not ours.
    stale = _record(pid=me.pid, started=me.started - 50)
    assert not owned_by_self(stale, env={}, chain=chain, facts=facts)
    # Not an ancestor: ours only through the same trusted Claude session and a live holder.
    other = [fm_proc, _info(os.getppid(), "claude")]
    trusted = {"CLAUDE_CODE_SESSION_ID": "s-1", "CLAUDE_PID": str(os.getppid())}
    assert owned_by_self(rec, env=trusted, chain=other, facts=facts)
    assert not owned_by_self(rec, env=trusted, chain=other, facts=DEAD)
    assert not owned_by_self(rec, env={**trusted, "CLAUDE_CODE_SESSION_ID": "s-2"}, chain=other,
                             facts=facts)
    assert not owned_by_self(rec, env={}, chain=other, facts=facts)
    assert not owned_by_self(_record(0), env=trusted, chain=other, facts=facts)


def test_resolve_holder_walk_rules() -> None:
    # Two live pids stand in for harness processes; fake pids fill the rest of the chain.
    inner, outer = os.getpid(), os.getppid()
    fm_proc = _info(99_999_991, "python3", "python3", "-m", "firstmate")
    shell = _info(99_999_992, "bash")
    run = [fm_proc, shell, _info(inner, "claude"), _info(outer, "claude"), shell]
    holder = resolve_holder(env=NAMES, chain=run)
    assert (holder.pid, holder.harness, holder.via) == (outer, "claude", "walk")
    assert set(holder.run_pids) == {inner, outer}
    broken = [fm_proc, _info(inner, "codex"), shell, _info(outer, "claude")]
    assert resolve_holder(env=NAMES, chain=broken).pid == inner
    mixed = [fm_proc, _info(inner, "codex"), _info(outer, "claude")]
    assert resolve_holder(env=NAMES, chain=mixed).harness == "codex"
    with pytest.raises(HarnessNotFound):
        resolve_holder(env=NAMES, chain=[fm_proc, shell])


def test_resolve_holder_trusted_session_and_override() -> None:
    inner, outer = os.getpid(), os.getppid()
    fm_proc = _info(99_999_991, "python3", "python3", "-m", "firstmate")
    shell = _info(99_999_992, "bash")
    chain = [fm_proc, _info(inner, "claude"), shell, _info(outer, "claude")]
    trusted = {"CLAUDE_CODE_SESSION_ID": "abc-123", "CLAUDE_PID": str(outer)}
    holder = resolve_holder(env={**NAMES, **trusted}, chain=chain)
    assert (holder.pid, holder.session_id, holder.via) == (outer, "abc-123", "trusted-session")
    # CLAUDE_PID must be a Claude-shaped ancestor, and the id must look like one.
    codex_chain = [fm_proc, _info(inner, "claude"), shell, _info(outer, "codex")]
    assert resolve_holder(env={**NAMES, **trusted}, chain=codex_chain).session_id is None
    assert resolve_holder(env={**NAMES, **trusted, "CLAUDE_CODE_SESSION_ID": "a b"}, chain=chain).pid == inner
    # The override wins, may name a non-harness, and never the caller itself.
    plain = [fm_proc, _info(inner, "node", "node", "/opt/ext.js"), shell]
    over = resolve_holder(env={"FM_SESSION_HOLDER_PID": str(inner)}, chain=plain)
    assert (over.pid, over.harness, over.via) == (inner, "unknown", "override")
    from firstmate.base.errors import UsageError

    with pytest.raises(UsageError):
        resolve_holder(env={"FM_SESSION_HOLDER_PID": "99999991"}, chain=plain)


_ids = st.text(alphabet="abcdef0123456789-", min_size=1, max_size=40).filter(
    lambda s: s[0] != "-"
)


@given(
    pid=st.integers(min_value=1, max_value=4_000_000),
    started=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    session_id=st.none() | _ids,
    at=st.floats(min_value=0, max_value=4e9, allow_nan=False),
)
def test_record_round_trips(pid: int, started: float, session_id: str | None, at: float) -> None:
    token = ProcessIdentity(pid=pid, started=started, cmd_hash="0123456789abcdef").token()
    rec = SessionRecord(pid=pid, identity=token, harness="pi", acquired_at=at,
                        session_id=session_id)
    assert SessionRecord.from_json(rec.to_json()) == rec


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    SessionRecord.from_json(data)


def test_recheck_owned_in_process_for_a_foreign_live_holder(fm_home: Home) -> None:
    me = identity_of(os.getppid())
    assert me is not None
    # (An explicitly named holder, FM_SESSION_HOLDER_PID: its harness is "unknown".)
    _write_record(fm_home, version=1, pid=me.pid, identity=me.token(), harness="unknown",
                  acquired_at=1.0, session_id=None)
    # This process's own ancestry includes the parent, so it owns it; an unrelated chain doesn't.
    assert recheck_owned(fm_home, env={}) is None
    chain = [_info(os.getpid(), "python3")]
    assert recheck_owned(fm_home, env={}, chain=chain) == (
        f"session lock is held by live harness pid {me.pid}; not re-arming"
    )


def test_a_live_process_that_is_no_longer_the_recorded_harness_does_not_hold_the_lock(
    fm_home: Home,
) -> None:
    # Same pid and start time as recorded, but not a claude process (it exec'd, or the record
    # was written for a pid that never was one): no claude session is left to hold the lock.
    proc = subprocess.Popen(["sleep", "600"])
    try:
        ident = exec_identity(proc)
        _write_record(fm_home, version=1, pid=proc.pid, identity=ident.token(), harness="claude",
                      acquired_at=1.0, session_id=None)
        record = read_record(fm_home).record
        assert record is not None
        facts = probe(proc.pid, "claude")
        assert facts.harness_checked and facts.harness is None
        assert classify(record, facts) == "not-harness"
        assert not blocks_reclaim(record)
        # The same record naming no particular harness (an explicit holder) still blocks.
        explicit = attrs.evolve(record, harness="unknown")
        assert classify(explicit, facts) == "live" and blocks_reclaim(explicit)
    finally:
        proc.kill()
        proc.wait()
