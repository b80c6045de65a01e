"""Fuzzing every harness hook entry: ``fm hook <harness> <event>`` with hostile stdin.

For each installed plugin (``firstmate.testing.contract_plugin_names``) and each of its
``HarnessInfo.hook_events``, a real ``fm hook`` process reads a random, truncated or hostile
payload: JSON objects with the harness's own keys and wrong types, valid payloads cut short,
terminal escape sequences, NUL, C1 controls, very long strings and bytes that are not UTF-8.
Whatever it reads, the hook never prints a traceback, exits with a status its harness documents
(0, or 2 for a harness's wake/block code), and never writes ESC or a C1 control to stdout (the
harness may show stdout to the user or the model).

The home has a registered crew and its session lock is held for this test process
(``FM_SESSION_HOLDER_PID``), so hooks get past their "nothing is supervised" and "not the
primary session" gates and really arm, park and block. Parks and
arm confirmations are bounded through the environment (``FM_CURSOR_PARK_SECONDS``,
``FM_CODEX_PARK_SECONDS``, ``FM_ARM_CONFIRM_TIMEOUT``, ``FM_CLAUDE_AUTOARM_ATTEMPTS``,
``FM_CLAUDE_STOPFAILURE_COOLDOWN_MS``), and a short heartbeat gives a parked arm a wake within
seconds; a hook
still running at the subprocess timeout is sent TERM and fails only if it ignores it.
Teardown stops every watcher a hook started (``fm arm --stop``).

Examples: 15 per hook event under the default profiles, 200 under ``HYPOTHESIS_PROFILE=deep``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from firstmate.plugin.manager import load_harness
from firstmate.testing import HOOK_GARBAGE_EXITS, contract_plugin_names, sample_call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CORE = str(Path(__file__).resolve().parents[2] / "core")
DEEP = os.environ.get("HYPOTHESIS_PROFILE", "") == "deep"
EXAMPLES = 200 if DEEP else 15
#: A hook call that is still running after this many seconds is sent TERM.
HOOK_TIMEOUT = 30.0
#: After TERM, how long a hook may take to clean up and exit.
TERM_GRACE = 15.0
#: ESC and the C1 controls, as text (stdout decoded as UTF-8).
FORBIDDEN_OUT = re.compile(r"[\x1b\x80-\x9f]")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(max(300, 10 * EXAMPLES * 8))]


def _hook_cases() -> list[tuple[str, str]]:
    cases: list[tuple[str, str]] = []
    for name in contract_plugin_names():
        try:
            host = load_harness(name)
        except Exception:  # a broken plugin is the contract suite's finding, not this one's
            continue
        info = host.harness(name)
        if info is None:
            continue
        cases += [(name, event) for event in info.hook_events]
    return cases


CASES = _hook_cases()


# --- strategies ----------------------------------------------------------------------------

ESCAPES = st.sampled_from([
    "\x1b[31m", "\x1b[2J", "\x1b]0;pwned\x07", "\x1b]8;;http://x\x1b\\", "\x1bP+q\x1b\\",
    "\x1b", "\x9b31m", "\x9d0;t\x9c", "\x85", "\x00", "\x07", "\r", "\n", "\u2028", "\u202e",
    "\ud800", "\udcff", "\ufeff",
])
HOSTILE_TEXT = st.one_of(
    st.text(max_size=30),
    st.lists(st.one_of(ESCAPES, st.text(max_size=6)), max_size=10).map("".join),
    st.builds(lambda c, n: c * n, st.sampled_from(["x", "é", "\x1b[", "\x00", "€"]),
              st.integers(0, 70000)),
)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                    HOSTILE_TEXT)
JSONISH = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=10)


def _base(harness: str, event: str) -> tuple[dict[str, Any], dict[str, str]]:
    call = sample_call(harness, event)
    return ({}, {}) if call is None else (dict(call[0]), dict(call[1]))


def _dump(value: Any) -> bytes:
    # surrogatepass: lone surrogates become bytes that are not valid UTF-8, on purpose.
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def payloads(draw: st.DrawFn, harness: str, event: str) -> bytes:
    base, _ = _base(harness, event)
    keys = sorted(base) or ["hook_event_name", "session_id", "cwd"]
    kind = draw(st.sampled_from(["wrong-types", "truncated", "hostile-strings", "bytes",
                                 "not-an-object", "spliced"]))
    if kind == "wrong-types":
        chosen = draw(st.lists(st.sampled_from(keys), unique=True, min_size=1))
        obj = dict(base)
        for key in chosen:
            obj[key] = draw(JSONISH)
        return _dump(obj)
    if kind == "truncated":
        data = _dump(base or {"k": "v"})
        return data[: draw(st.integers(0, max(0, len(data) - 1)))]
    if kind == "hostile-strings":
        obj = dict(base)
        for key in draw(st.lists(st.sampled_from(keys), unique=True, min_size=1)):
            obj[key] = draw(HOSTILE_TEXT)
        # As JSON escapes (\u0000, \ud800) NULs and lone surrogates parse into the payload's
        # strings, where a path built from them (the cwd) must not crash the hook.
        if draw(st.booleans()):
            return json.dumps(obj, ensure_ascii=True).encode()
        return _dump(obj)
    if kind == "bytes":
        return draw(st.binary(max_size=512))
    if kind == "not-an-object":
        return _dump(draw(st.one_of(SCALARS, st.lists(JSONISH, max_size=4))))
    data = _dump(base or {"k": "v"})
    at = draw(st.integers(0, len(data)))
    junk = draw(st.sampled_from([b"\x00", b"\xff\xfe", b"\xc0\x80", b"\x1b[2J", b"\xc2\x9b",
                                 b"\xed\xa0\x80", b"\x80" * 64]))
    return data[:at] + junk + data[at:]


# --- the home --------------------------------------------------------------------------------


def _env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FM_", "FIRSTMATE_"))}
    env.update({
        "PYTHONPATH": os.pathsep.join(
            [CORE, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]),
        "FM_HOME": str(home),
        # This test process stands in for the harness: the hooks see their session as primary.
        "FM_SESSION_HOLDER_PID": str(os.getpid()),
        "FM_TMUX": str(home.parent / "no-tmux"),
        "FM_CLAUDE_AUTOARM_ATTEMPTS": "1",
        "FM_CLAUDE_AUTOARM_SYNC_WAIT_MS": "0",
        # StopFailure otherwise paces itself (waits out a cooldown) before claiming a cycle.
        "FM_CLAUDE_STOPFAILURE_COOLDOWN_MS": "0",
        "FM_ARM_CONFIRM_TIMEOUT": "3",
        "FM_CURSOR_PARK_SECONDS": "1",
        "FM_CODEX_PARK_SECONDS": "1",
        # Grok's fallback resumes the session with a command: make it a harmless one.
        "FM_GROK_COMMAND": "true",
        # A parked arm gets a heartbeat wake within seconds, so hooks that legitimately park
        # on the arm (Claude's Stop) come back with a wake instead of running into the timeout.
        "FM_HEARTBEAT": "1",
        "FM_HEARTBEAT_MAX": "2",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    env.update(extra)
    return env


def _fm(env: dict[str, str], *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "firstmate", *args], capture_output=True,
                          env=env, timeout=timeout, check=False, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def crew_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("fuzz-hooks") / "home"
    env = _env(root, {})
    added = _fm(env, "crew", "add", "fuzz-crew", "--pane", "%1")
    assert added.returncode == 0, added.stderr
    locked = _fm(env, "lock", "acquire")
    assert locked.returncode == 0, locked.stderr
    yield root
    stopped = _fm(env, "arm", "--stop")
    _fm(env, "lock", "release")
    assert stopped.returncode == 0, stopped.stderr


# --- the fuzz --------------------------------------------------------------------------------


def _run_hook(env: dict[str, str], harness: str, event: str, data: bytes,
              cwd: Path) -> tuple[int | None, bytes, bytes]:
    """Exit status (None: it had to be TERMed and exited), stdout, stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "firstmate", "hook", harness, event],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=cwd)
    try:
        out, err = proc.communicate(data, timeout=HOOK_TIMEOUT)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=TERM_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail(f"fm hook {harness} {event} ignored TERM after {HOOK_TIMEOUT}s")
        return None, out, err


if not CASES:
    def test_fuzz_hooks_needs_plugins() -> None:
        pytest.skip("no harness plugin with hook events is installed; install plugins/* to fuzz them")
else:
    @pytest.mark.parametrize(("harness", "event"), CASES, ids=[f"{h}-{e}" for h, e in CASES])
    def test_hook_survives_hostile_stdin(harness: str, event: str, crew_home: Path,
                                         tmp_path_factory: pytest.TempPathFactory) -> None:
        _, call_env = _base(harness, event)
        env = _env(crew_home, call_env)
        cwd = tmp_path_factory.mktemp(f"cwd-{harness}-{event}")

        @settings(max_examples=EXAMPLES, deadline=None, derandomize=not DEEP,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(data=payloads(harness, event))
        def check(data: bytes) -> None:
            rc, out, err = _run_hook(env, harness, event, data, cwd)
            stderr = err.decode("utf-8", "replace")
            assert "Traceback" not in stderr, stderr
            assert "internal error" not in stderr, stderr
            if rc is not None:
                assert rc in HOOK_GARBAGE_EXITS, (
                    f"fm hook {harness} {event} exited {rc} for {data[:200]!r}: {stderr[-400:]}")
            text = out.decode("utf-8", "replace")
            bad = FORBIDDEN_OUT.search(text)
            assert bad is None, (
                f"fm hook {harness} {event} wrote {bad.group()!r} to stdout for {data[:200]!r}")

        check()
