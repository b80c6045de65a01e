"""Process identity, reused-pid refusal, ancestry and harness detection, with real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import psutil
import pytest
from firstmate.plugin import harnessprocs
from firstmate.plugin.harnessprocs import HarnessTable, harness_of
from firstmate.store import identity
from firstmate.store.identity import ProcessIdentity, ProcInfo
from firstmate.testing import read_line
from firstmate.testing.procs import eventually
from hypothesis import given
from hypothesis import strategies as st

CORE = str(Path(__file__).resolve().parents[2] / "core")
DEADLINE = 20.0


def child_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": CORE, **extra}


def spawn(code: str, *, argv0: str | None = None, **extra_env: str) -> subprocess.Popen[bytes]:
    exe = argv0 or sys.executable
    return subprocess.Popen(
        [exe, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env(**extra_env)
    )


# The child reports itself, then answers each "ping" with "pong" until stdin closes.
ECHO = (
    "import sys\n"
    "print('ready', flush=True)\n"
    "for line in sys.stdin:\n"
    "    print('pong', flush=True)\n"
)


@pytest.fixture
def live_child() -> Iterator[subprocess.Popen[bytes]]:
    proc = spawn(ECHO)
    assert read_line(proc) == "ready"
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=DEADLINE)


def ping(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stdin is not None
    proc.stdin.write(b"ping\n")
    proc.stdin.flush()
    return read_line(proc)


# --- tokens -----------------------------------------------------------------------------------


def test_current_token_round_trips() -> None:
    me = identity.current()
    parsed = ProcessIdentity.parse(me.token())
    assert parsed is not None
    assert parsed.pid == os.getpid()
    assert parsed.same_as(me)
    assert identity.matches(parsed)


@given(
    pid=st.integers(min_value=1, max_value=4_000_000),
    started=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    digest=st.text(alphabet="0123456789abcdef", min_size=16, max_size=16),
)
def test_token_round_trip_keeps_pid_time_and_hash(pid: int, started: float, digest: str) -> None:
    ident = ProcessIdentity(pid=pid, started=started, cmd_hash=digest)
    parsed = ProcessIdentity.parse(ident.token())
    assert parsed is not None
    assert parsed.same_as(ident)
    assert parsed.token() == ident.token()


@pytest.mark.parametrize(
    "token",
    [
        "", "garbage", "123", "123:1.00", "123:1.00:", ":1.00:0123456789abcdef",
        "0:1.00:0123456789abcdef", "-5:1.00:0123456789abcdef", "abc:1.00:0123456789abcdef",
        "12:nan:0123456789abcdef", "12:inf:0123456789abcdef", "12:1e9:0123456789abcdef",
        "12:1.00:XYZ", "12:1.00:0123456789ABCDEG", "12:1.00:0123", "12:1.00:0123456789abcdef:x",
        "12 :1.00:0123456789abcdef", "1:2:3:4", "12:1.00:" + "a" * 65, "\x00", "٣:1.00:0123456789abcdef",
    ],
)
def test_malformed_tokens_parse_to_none(token: str) -> None:
    assert ProcessIdentity.parse(token) is None


@pytest.mark.parametrize("value", [None, 12, 1.5, b"12:1.00:0123456789abcdef", ["x"]])
def test_non_string_tokens_parse_to_none(value: object) -> None:
    assert ProcessIdentity.parse(value) is None


@given(st.text(max_size=200))
def test_parse_never_raises(text: str) -> None:
    ProcessIdentity.parse(text)


# --- liveness and reuse ---------------------------------------------------------------------


def test_fast_current_identity_equals_psutil_identity_in_a_child() -> None:
    # psutil is the fallback where /proc cannot tell: a token either path wrote must match
    # when the other one checks it.
    proc = spawn(
        "from firstmate.store.identity import current\n"
        "print(current().token(), flush=True)\n"
        "import sys; sys.stdin.read()\n"
    )
    try:
        reported = ProcessIdentity.parse(read_line(proc))
        assert reported is not None
        assert reported.pid == proc.pid
        live = identity.psutil_identity(proc.pid)
        assert live is not None
        assert live.token() == reported.token()
        assert identity.matches(reported)
        assert identity.identity_of(proc.pid) == reported
    finally:
        proc.kill()
        proc.wait(timeout=DEADLINE)


def test_liveness_and_identity_are_read_from_proc_without_psutil(
        live_child: subprocess.Popen[bytes]) -> None:
    """On Linux every question about another process is answered from /proc (the standard
    library's one implementation, firstmate.base.proctoken); psutil is never imported."""
    if not sys.platform.startswith("linux"):
        pytest.skip("/proc answers on Linux only")
    code = (
        "import json, sys\n"
        "from firstmate.store import identity\n"
        "from firstmate.store.grants import Grant, owner_state\n"
        f"pid = {live_child.pid}\n"
        "live = identity.identity_of(pid)\n"
        "def grant(token):\n"
        "    return Grant(owner_pid=pid, identity=token, generation='g', activated_at=0.0,\n"
        "                 published=True)\n"
        "reused = f'{pid}:1.00:0000000000000000'  # the pid, but another process\n"
        "print(json.dumps([identity.is_alive(pid), identity.matches(live), "
        "identity.matches(identity.current()), owner_state(grant(live.token())), "
        "owner_state(grant(reused)), "
        "'psutil' in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=child_env(), timeout=DEADLINE, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '[true, true, true, "live", "gone", false]'


def test_dead_process_identity_does_not_match_and_is_not_signalled() -> None:
    proc = spawn(ECHO)
    assert read_line(proc) == "ready"
    ident = identity.identity_of(proc.pid)
    assert ident is not None and identity.matches(ident)
    proc.kill()
    proc.wait(timeout=DEADLINE)
    assert not identity.is_alive(proc.pid)
    assert identity.identity_of(proc.pid) is None
    assert not identity.matches(ident)
    assert not identity.signal_verified(ident, signal.SIGTERM)


def test_zombie_counts_as_dead() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    # Not reaped yet: the exited child stays a zombie until we wait for it.
    eventually("the child to become a zombie",
               lambda: psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE, DEADLINE,
               interval=0.01)
    try:
        assert not identity.is_alive(proc.pid)
        assert identity.identity_of(proc.pid) is None
    finally:
        proc.wait(timeout=DEADLINE)


@pytest.mark.parametrize(
    "alter",
    [
        pytest.param(lambda i: attrs.evolve(i, started=i.started + 2.5), id="start-time"),
        pytest.param(lambda i: attrs.evolve(i, started=i.started - 1.03), id="start-time-tick"),
        pytest.param(lambda i: attrs.evolve(i, cmd_hash="0" * 16), id="cmd-hash"),
    ],
)
def test_reused_pid_is_never_signalled(live_child: subprocess.Popen[bytes], alter: object) -> None:
    real = identity.identity_of(live_child.pid)
    assert real is not None
    forged = alter(real)  # type: ignore[operator]
    assert forged.pid == live_child.pid
    assert identity.is_alive(live_child.pid)
    assert not identity.matches(forged)
    assert not identity.signal_verified(forged, signal.SIGTERM)
    assert not identity.signal_verified(forged, signal.SIGKILL)
    # Still running and answering: no signal was delivered.
    assert ping(live_child) == "pong"
    assert live_child.poll() is None


@pytest.mark.parametrize("shift", [-1.0, 1.0, 1.01, -0.01])
def test_a_boot_time_that_moved_by_a_second_still_names_the_same_process(
        live_child: subprocess.Popen[bytes], shift: float) -> None:
    # Linux derives a start time from the boot time in whole seconds, which moves by one as the
    # wall clock is slewed: a lock held for hours must not turn stale when it does.
    real = identity.identity_of(live_child.pid)
    assert real is not None
    recorded = ProcessIdentity.parse(attrs.evolve(real, started=real.started + shift).token())
    assert recorded is not None and identity.matches(recorded)


def test_verified_identity_is_signalled(live_child: subprocess.Popen[bytes]) -> None:
    real = identity.identity_of(live_child.pid)
    assert real is not None
    assert identity.signal_verified(real, signal.SIGTERM)
    assert live_child.wait(timeout=DEADLINE) == -signal.SIGTERM
    assert not identity.signal_verified(real, signal.SIGTERM)


def test_non_positive_pids_are_never_alive_or_signalled() -> None:
    for pid in (0, -1):
        assert not identity.is_alive(pid)
        assert identity.identity_of(pid) is None
        assert not identity.signal_verified(ProcessIdentity(pid, 0.0, "0" * 16), 0)


# --- ancestry -------------------------------------------------------------------------------


def test_ancestry_of_a_child_contains_this_process(live_child: subprocess.Popen[bytes]) -> None:
    chain = identity.ancestry(live_child.pid)
    pids = [p.pid for p in chain]
    assert pids[0] == live_child.pid
    assert pids[1] == os.getpid()
    assert chain[0].ppid == os.getpid()
    assert chain[0].cmdline[:2] == (sys.executable, "-c")
    assert len(pids) == len(set(pids))


def test_ancestry_defaults_to_this_process_and_is_bounded(
    live_child: subprocess.Popen[bytes],
) -> None:
    assert identity.ancestry()[0].pid == os.getpid()
    assert [p.pid for p in identity.ancestry(live_child.pid, max_hops=0)] == [live_child.pid]
    assert len(identity.ancestry(live_child.pid, max_hops=1)) == 2


def test_ancestry_of_a_gone_process_is_empty() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=DEADLINE)
    assert identity.ancestry(proc.pid) == []


def test_ancestry_survives_a_parent_vanishing_mid_walk() -> None:
    # The middle process exits as soon as it has reported its child; the walk must not fail.
    proc = spawn(
        "import subprocess, sys\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'],"
        " stdin=subprocess.PIPE)\n"
        "print(c.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    grandchild = int(read_line(proc))
    try:
        assert [p.pid for p in identity.ancestry(grandchild)][:3] == [grandchild, proc.pid, os.getpid()]
        proc.kill()
        proc.wait(timeout=DEADLINE)
        chain = identity.ancestry(grandchild)
        assert chain[0].pid == grandchild
        assert proc.pid not in [p.pid for p in chain]
    finally:
        with_suppress_kill(grandchild)


def with_suppress_kill(pid: int) -> None:
    try:
        p = psutil.Process(pid)
        p.kill()
        p.wait(timeout=DEADLINE)
    except psutil.Error:
        pass


# --- harness detection ----------------------------------------------------------------------


def info(*cmdline: str, name: str | None = None, exe: str = "") -> ProcInfo:
    base = os.path.basename(cmdline[0]) if cmdline else ""
    return ProcInfo(pid=4242, ppid=1, name=name if name is not None else base, cmdline=cmdline, exe=exe)


HOME = "/home/u"
POSITIVE = [
    (info("claude"), "claude"),
    (info("claude", "--resume", exe=f"{HOME}/.local/share/claude/versions/2.1.220"), "claude"),
    (info(f"{HOME}/.local/share/claude/versions/2.1.220", name="2.1.220",
          exe=f"{HOME}/.local/share/claude/versions/2.1.220"), "claude"),
    (info("node", "/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js"), "claude"),
    (info("node", "--no-warnings", "--enable-source-maps",
          "/usr/local/lib/node_modules/@anthropic-ai/claude-code/cli.js", "-p", "hi"), "claude"),
    (info("codex", exe="/usr/lib/node_modules/@openai/codex/vendor/x86_64-unknown-linux-musl/codex/codex"),
     "codex"),
    (info("node", "/usr/lib/node_modules/@openai/codex/bin/codex.js"), "codex"),
    (info("opencode"), "opencode"),
    (info("node", "/usr/lib/node_modules/opencode-ai/bin/opencode"), "opencode"),
    (info(".opencode", "run"), "opencode"),
    (info("grok"), "grok"),
    (info("node", f"{HOME}/.npm-global/lib/node_modules/@vibe-kit/grok-cli/dist/index.js"), "grok"),
    (info("cursor-agent", "--trust"), "cursor"),
    (info(f"{HOME}/.local/bin/cursor-agent", "--use-system-ca", name="node",
          exe=f"{HOME}/.local/share/cursor-agent/versions/2025.09.04-fc40cd1/node"), "cursor"),
    (info(f"{HOME}/.local/share/cursor-agent/versions/2025.09.04-fc40cd1/node", "--use-system-ca",
          f"{HOME}/.local/share/cursor-agent/versions/2025.09.04-fc40cd1/index.js"), "cursor"),
    (info("pi"), "pi"),
    (info("pi-signed"), "pi"),
    (info("node", "/proj/node_modules/.bin/pi", "--mode", "rpc"), "pi"),
    (info("/usr/bin/node", "/proj/node_modules/@mariozechner/pi-coding-agent/dist/cli.js"), "pi"),
    (info("node", "/x/node_modules/@earendil-works/pi-coding-agent/dist/cli.js"), "pi"),
    (info("omp"), "omp"),
    (info("bun", "/proj/node_modules/.bin/omp", "--mode", "rpc"), "omp"),
    (info("/proj/node_modules/.bin/bun", "/proj/node_modules/@oh-my-pi/pi-coding-agent/dist/cli.js"),
     "omp"),
    (info("bun", "run", "/opt/omp"), "omp"),
    (info("kimi"), "kimi"),
    (info("/usr/bin/python3", f"{HOME}/.local/bin/kimi"), "kimi"),
    (info("python3.12", "-m", "kimi_cli"), "kimi"),
    (info("python3", "-X", "utf8", "-m", "kimi_cli.cli", "--yolo"), "kimi"),
    (info("C:\\Program Files\\nodejs\\node.exe",
          "C:\\Users\\u\\AppData\\Roaming\\npm\\node_modules\\@anthropic-ai\\claude-code\\cli.js"),
     "claude"),
    (info("claude.exe"), "claude"),
]
NEGATIVE = [
    info("python3", "-m", "pytest", "tests/core"),
    info("/usr/bin/pip", "install", "x"),
    info("pip"),
    info("pipx", "run", "x"),
    info("api-server"),
    info("/srv/api-server/bin/server"),
    info("spin"),
    info("node", "/srv/api/server.js"),
    info("node", "-e", "require('/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js')"),
    info("python3", "-c", "import kimi_cli"),
    info("python3", "/home/u/claude_notes.py"),
    info("python3", "/home/u/pi.py"),
    info("vim", "/home/u/.local/bin/claude"),
    info("bash", "-c", "claude --resume"),
    info("/usr/bin/bash"),
    info("claude-helper"),
    info("codexctl"),
    info("sh", "-c", "omp"),
    info("node", "/home/u/pi/index.js"),
    info("python3", "-m", "pi"),
    info("", name=""),
    ProcInfo(pid=1, ppid=0, name="systemd"),
]


#: What the harness plugins declare (their HarnessInfo process names, package markers and python
#: modules), as the table identity builds from them; kimi stands for a harness with a module.
TABLE = HarnessTable(
    names={"claude": "claude", "codex": "codex", "opencode": "opencode", ".opencode": "opencode",
           "grok": "grok", "cursor-agent": "cursor", "pi": "pi", "pi-signed": "pi", "omp": "omp",
           "kimi": "kimi"},
    markers=((("@anthropic-ai", "claude-code"), "claude"), (("@openai", "codex"), "codex"),
             (("opencode-ai",), "opencode"), (("@mariozechner", "pi-coding-agent"), "pi"),
             (("@earendil-works", "pi-coding-agent"), "pi"),
             (("@oh-my-pi", "pi-coding-agent"), "omp"), (("@vibe-kit", "grok-cli"), "grok"),
             (("cursor-agent",), "cursor"), (("kimi-cli",), "kimi"), (("kimi_cli",), "kimi")),
    modules={"kimi_cli": "kimi", "kimi": "kimi"},
)


@pytest.mark.parametrize(("proc", "expected"), POSITIVE, ids=lambda v: repr(v)[:70] if isinstance(v, ProcInfo) else None)
def test_harness_detected(proc: ProcInfo, expected: str) -> None:
    assert harness_of(proc, env={}, table=TABLE) == expected


@pytest.mark.parametrize("proc", NEGATIVE, ids=lambda v: repr(v)[:70])
def test_not_a_harness(proc: ProcInfo) -> None:
    assert harness_of(proc, env={}, table=TABLE) is None


def test_extra_harness_names_from_the_environment() -> None:
    env = {harnessprocs.HARNESS_NAMES_ENV: " mybot , other-agent ,,"}
    table = TABLE.with_extra(env)
    assert harness_of(info("mybot"), env=env, table=table) == "mybot"
    assert harness_of(info("node", "/opt/x/other-agent"), env=env, table=table) == "other-agent"
    assert harness_of(info("mybot"), env={}, table=TABLE) is None
    # A plugin's names keep their canonical harness.
    extra = TABLE.with_extra({harnessprocs.HARNESS_NAMES_ENV: "cursor-agent"})
    assert harness_of(info("cursor-agent"), table=extra) == "cursor"


def test_core_alone_knows_no_harness() -> None:
    # No plugin installed (or allowed): nothing is a harness but what the environment names.
    none = {"FIRSTMATE_PLUGINS": "none"}
    assert harnessprocs.harness_table(none) == HarnessTable()
    assert harness_of(info("claude"), env=none) is None
    named = {**none, harnessprocs.HARNESS_NAMES_ENV: "claude"}
    assert harness_of(info("claude"), env=named) == "claude"


def test_the_table_is_what_the_plugins_declare() -> None:
    from firstmate.plugin.harness import HarnessInfo

    declared = HarnessInfo(name="acme", display_name="Acme", family="hook", rearm_owner="hook",
                           wake_channel="x", process_names=("acme", "acme-cli"),
                           package_markers=(("@acme", "agent"),), python_modules=("acme_agent",))
    table = HarnessTable.of([declared])
    assert harness_of(info("acme-cli"), table=table) == "acme"
    assert harness_of(info("node", "/n/node_modules/@acme/agent/cli.js"), table=table) == "acme"
    assert harness_of(info("python3", "-m", "acme_agent"), table=table) == "acme"
    assert harness_of(info("claude"), table=table) is None


def test_innermost_harness_walks_real_ancestry(tmp_path: Path) -> None:
    # A python interpreter started under another name plays the harness; its grandchild finds it.
    # The harness only runs subprocess, so it needs nothing installed; the grandchild imports
    # firstmate, so it runs this environment's own interpreter.
    fake = tmp_path / "fmtestharness"
    fake.symlink_to(sys.executable)
    code = (
        "import subprocess\n"
        f"out = subprocess.run([{sys.executable!r}, '-c',"
        " 'from firstmate.plugin.harnessprocs import innermost_harness;"
        " h = innermost_harness(); print(h.pid if h else None)'],"
        " capture_output=True, text=True, check=True).stdout.strip()\n"
        "print(out, flush=True)\n"
    )
    proc = spawn(code, argv0=str(fake), **{harnessprocs.HARNESS_NAMES_ENV: "fmtestharness"})
    try:
        assert read_line(proc) == str(proc.pid)
    finally:
        proc.wait(timeout=DEADLINE)


def test_innermost_harness_ignores_unrelated_ancestry(live_child: subprocess.Popen[bytes]) -> None:
    found = harnessprocs.innermost_harness(live_child.pid, max_hops=1)
    assert found is None or found.pid == os.getpid()
