"""Fuzzing the edges the hostile-input audit found: crew and check arguments that are not UTF-8,
the bridge protocol (depth, size, encoding), config paths of every file type, and writes under
a file-size limit. Whatever the input: no traceback, no internal error, a documented exit status,
one line on failure, and nothing half-written."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from chaos_support import DEADLINE, base_env, fm_argv, one_line_error, run_fm
from firstmate.store import crew
from firstmate.store.home import Home
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SPAWN_EXAMPLES = max(5, settings.default.max_examples // 4)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(max(300, 4 * settings.default.max_examples))]

BYTES = st.one_of(
    st.binary(min_size=1, max_size=60).filter(lambda b: b"\0" not in b),
    st.sampled_from([b"\xff", b"caf\xe9", b"\xed\xa0\x80", b"\x1b[31mred\x1b[0m", b"\x9b2J",
                     b"a\tb\nc\rd", b"\xe2\x80\xa8", b"done: \xff\xfe", b"needs-decision: key=k \xe9"]),
)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    made = Home(tmp_path_factory.mktemp("edges") / "home").ensure()
    assert run_fm(base_env(made.root), "crew", "add", "c1", "--pane", "%1").returncode == 0
    yield made


def _clean_run(done: subprocess.CompletedProcess[bytes], codes: set[int]) -> None:
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err and "internal error" not in err, err
    assert done.returncode in codes, (done.returncode, err)
    if done.returncode:
        one_line_error(done)


@settings(max_examples=SPAWN_EXAMPLES, suppress_health_check=[HealthCheck.too_slow],
          deadline=None)
@given(verb=st.sampled_from([b"status", b"answer", b"turn-ended"]), text=BYTES)
def test_crew_bytes_arguments_are_recorded_or_refused_in_one_line(
        home: Home, verb: bytes, text: bytes) -> None:
    env = base_env(home.root)
    args = [b"crew", verb, b"c1", text] if verb != b"answer" else \
        [b"crew", b"answer", b"c1", b"--key", b"k", text]
    if verb == b"turn-ended":
        args = [b"crew", b"turn-ended", text]
    before = crew.path(home, "c1", crew.STATUS)
    size = before.stat().st_size if before.exists() else 0
    done = run_fm(env, *args)
    _clean_run(done, {0, 2, 4})
    if before.exists():
        data = before.read_bytes()
        data.decode("utf-8")  # strictly UTF-8: undecodable bytes were replaced
        assert data.endswith(b"\n") or len(data) == size


@settings(max_examples=SPAWN_EXAMPLES, suppress_health_check=[HealthCheck.too_slow],
          deadline=None)
@given(name=BYTES, word=BYTES)
def test_check_bytes_arguments_never_crash(home: Home, name: bytes, word: bytes) -> None:
    env = base_env(home.root)
    _clean_run(run_fm(env, b"check", b"add", name, b"--", b"echo", word), {0, 2, 3, 4})
    listed = run_fm(env, "check", "list")
    _clean_run(listed, {0})
    assert b"\x1b" not in listed.stdout
    assert isinstance(json.loads(run_fm(env, "check", "list", "--json").stdout)["checks"], list)


@settings(max_examples=SPAWN_EXAMPLES, suppress_health_check=[HealthCheck.too_slow],
          deadline=None)
@given(limit=st.integers(0, 400), text=st.text(min_size=1, max_size=300).map(
    lambda t: "needs-decision: key=k " + t.replace("\0", "")))  # argv has no NUL
def test_writes_under_a_file_size_limit_are_whole_or_absent(
        home: Home, limit: int, text: str) -> None:
    env = base_env(home.root)
    log = crew.path(home, "c1", crew.STATUS)
    size = log.stat().st_size if log.exists() else 0
    done = subprocess.run(
        fm_argv("crew", "status", "c1", text), capture_output=True, env=env, timeout=DEADLINE,
        check=False, preexec_fn=lambda: resource.setrlimit(
            resource.RLIMIT_FSIZE, (size + limit, size + limit)))
    _clean_run(done, {0, 4})
    after = log.read_bytes()
    if done.returncode == 0:
        assert after.endswith(b"\n") and len(after) > size
    else:
        assert len(after) == size  # rolled back
    for args in (("wake", "append", "check", "k", text[:80]), ("check", "add", "x", "--", "true")):
        done = subprocess.run(
            fm_argv(*args), capture_output=True, env=env, timeout=DEADLINE, check=False,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
        _clean_run(done, {0, 3, 4})


# --- the bridge protocol ------------------------------------------------------------------------


LINES = st.one_of(
    st.integers(1, 200_000).map(lambda n: b"[" * n),
    st.integers(1, 2000).map(lambda n: b'{"type": "hello", "protocol": ' + b"[" * n + b"]" * n + b"}"),
    st.binary(max_size=200).map(lambda b: b.replace(b"\n", b" ")),
    st.integers(1, 3 * 1024 * 1024).map(lambda n: b"x" * n),
    st.sampled_from([b'{"type": "status", "id": "\xff"}', b'{"type": "\\ud800"}', b"{}", b"null",
                     b'{"type": "hello", "protocol": 1e999}', b'{"id": [[[]]]}']),
)


@settings(max_examples=SPAWN_EXAMPLES, suppress_health_check=[HealthCheck.too_slow],
          deadline=None)
@given(lines=st.lists(LINES, min_size=1, max_size=4))
def test_the_bridge_answers_every_hostile_line_and_keeps_running(
        home: Home, lines: list[bytes]) -> None:
    env = base_env(home.root, FIRSTMATE_PLUGINS="")
    env.pop("FIRSTMATE_PLUGINS")
    proc = subprocess.Popen(fm_argv("bridge", "pi"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert proc.stdin is not None and proc.stdout is not None

        def feed() -> None:
            assert proc.stdin is not None
            try:
                for line in lines:
                    proc.stdin.write(line + b"\n")
                proc.stdin.write(b'{"type": "status", "id": "last"}\n')
                proc.stdin.flush()
            except BrokenPipeError:
                pass

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        replies = []
        while True:
            raw = proc.stdout.readline()
            assert raw, proc.stderr.read() if proc.stderr else b""
            reply = json.loads(raw)
            replies.append(reply)
            if reply.get("id") == "last":
                break
        writer.join(DEADLINE)
        assert len([r for r in replies if r.get("type") in ("error", "reply", "welcome")]) >= 1
        assert reply.get("ok") is True
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
        assert "Traceback" not in err and "internal error" not in err, err


# --- config paths of every type -----------------------------------------------------------------


def _plant(kind: str, path: Path) -> socket.socket | None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    elif kind == "dangling":
        path.symlink_to(path.parent / "gone" / "deeper" / path.name)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        return sock
    elif kind == "read-only":
        path.write_text('{"user": true}\n')
        path.chmod(0o444)
    return None


@pytest.mark.parametrize("kind", ["fifo", "zero", "directory", "dangling", "socket", "read-only"])
@pytest.mark.parametrize("harness", ["claude", "cursor", "codex", "grok"])
def test_install_uninstall_and_doctor_refuse_a_config_of_the_wrong_type(
        tmp_path: Path, kind: str, harness: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    home = Home(tmp_path / "home").ensure()
    env = base_env(home.root)
    env.pop("FIRSTMATE_PLUGINS")
    dry = run_fm(env, "install", harness, "--project", str(project), "--dry-run")
    if dry.returncode == 5:
        pytest.skip(f"the {harness} plugin is not installed here")
    assert dry.returncode == 0, dry.stderr
    marker = f"fm install {harness}: would create "
    targets = [project / line[len(marker):] for line in dry.stdout.decode().splitlines()
               if line.startswith(marker)]
    assert targets, dry.stdout
    sock = _plant(kind, targets[0])
    try:
        before = sorted(str(p) for p in tmp_path.rglob("*"))
        for args in (("install", harness, "--project", str(project)),
                     ("uninstall", harness, "--project", str(project)),
                     ("doctor",)):
            done = run_fm(env, *args, timeout=DEADLINE)
            err = done.stderr.decode("utf-8", "replace")
            assert "Traceback" not in err and "internal error" not in err, err
            # (Uninstalling from a read-only file that holds nothing of ours changes nothing.)
            if args[0] == "install" or (args[0] == "uninstall" and kind != "read-only"):
                assert done.returncode != 0, (args, done.stdout)
                one_line_error(done)
        assert not (targets[0].parent / "gone").exists()
        if kind == "read-only":
            assert targets[0].read_text() == '{"user": true}\n'
        after = sorted(str(p) for p in tmp_path.rglob("*"))
        assert [p for p in after if p not in before and "/home/" not in p] == []
    finally:
        if sock is not None:
            sock.close()


# --- hook payloads whose paths the OS cannot take -----------------------------------------------


# JSON escapes: NUL and lone surrogates parse into the payload's cwd string.
@pytest.mark.parametrize("cwd", [r"/tmp/a\u0000b", r"/tmp/\ud800", r"relative\u0000", r"/\udce9"])
@pytest.mark.parametrize("harness", ["claude", "cursor", "codex", "grok"])
def test_a_hook_payload_cwd_with_nul_or_a_lone_surrogate_never_crashes(
        tmp_path: Path, harness: str, cwd: str) -> None:
    home = Home(tmp_path / "home").ensure()
    env = base_env(home.root, FM_SESSION_HOLDER_PID=str(os.getpid()), FM_ARM_CONFIRM_TIMEOUT="3",
                   FM_CLAUDE_AUTOARM_SYNC_WAIT_MS="0", FM_CURSOR_PARK_SECONDS="1",
                   FM_CODEX_PARK_SECONDS="1", FM_GROK_COMMAND="true",
                   # A parked Stop hook comes back with a heartbeat wake within seconds.
                   FM_HEARTBEAT="1", FM_HEARTBEAT_MAX="2")
    env.pop("FIRSTMATE_PLUGINS")
    assert run_fm(env, "crew", "add", "c1", "--pane", "%1").returncode == 0
    payload = ('{"hook_event_name": "Stop", "hookEventName": "stop", "session_id": "s\\ud800", '
               '"sessionId": "s", "cwd": "' + cwd + '", "stop_hook_active": false}').encode()
    try:
        for args in (("hook", harness, "stop"), ("turnend-guard", "--harness", harness,
                                                  "--no-wait")):
            done = run_fm(env, *args, stdin=payload)
            if done.returncode == 5:
                pytest.skip(f"the {harness} plugin is not installed here")
            err = done.stderr.decode("utf-8", "replace")
            assert "Traceback" not in err and "internal error" not in err, (args, err)
            assert done.returncode in (0, 1, 2), (args, done.returncode, err)
    finally:
        run_fm(env, "arm", "--stop")
