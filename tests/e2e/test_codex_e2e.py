"""End to end: a real Codex (npm ``@openai/codex``) against a loopback mock model, supervised by
Firstmate's parked Codex Stop hook.

From ``fm install codex --parked`` and ``fm crew add``, ``codex exec`` runs one turn; its Stop
hook parks on the arm. A wake appended from outside must reach the mock as the continuation
prompt, a successor watcher must hold the lock afterwards, and a second wake proves the re-arm.
Skipped only when node/npm are absent. The npm install is cached under ``.e2e-cache/``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.testing.procs import eventually

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

from mock_responses import MockModel, start

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".e2e-cache" / "codex"
CODEX_VERSION = "0.169.0"
DEADLINE = 90.0

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None,
    reason="node and npm are needed to install and run the real Codex CLI")


def codex_bin() -> Path:
    binary = CACHE / "node_modules" / ".bin" / "codex"
    if not binary.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", f"@openai/codex@{CODEX_VERSION}"],
                       cwd=CACHE, check=True, capture_output=True, timeout=600)
    return binary


@pytest.fixture
def mock() -> Iterator[MockModel]:
    server = start()
    try:
        yield server
    finally:
        server.close()


def _env(tmp: Path, mock: MockModel, fm_home: Path) -> dict[str, str]:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    fm = bindir / "fm"
    fm.write_text(f"#!/bin/sh\nexec {sys.executable} -m firstmate \"$@\"\n")
    fm.chmod(0o755)
    paths = [str(REPO / "core"), str(REPO / "plugins" / "codex" / "src")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FM_", "CODEX_", "FIRSTMATE_"))}
    env.update(HOME=str(tmp / "user"), PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join(paths), FM_HOME=str(fm_home), FM_SIGNAL_GRACE="0",
               FM_TMUX=str(tmp / "no-tmux"), MOCK_API_KEY="sk-dummy", NO_COLOR="1")
    return env


def _fm(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "firstmate", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


def _watcher(env: dict[str, str]) -> int | None:
    done = _fm(env, "status", "--json")
    if done.returncode != 0:
        return None
    watcher = json.loads(done.stdout)["watcher"]
    return int(watcher["pid"]) if watcher.get("healthy") and watcher.get("pid") else None


def _attached(fm_home: Path, watcher: object) -> bool:
    from firstmate.continuity.armlinks import links
    from firstmate.store.database import Store
    from firstmate.store.home import Home

    db = Store(Home(fm_home))
    try:
        return any(link.origin == "attached" and link.watcher_pid == watcher
                   for link in links(db))
    finally:
        db.close()


@pytest.mark.parametrize("git", [False, True], ids=["plain", "git-project"])
def test_parked_stop_wakes_real_codex_and_rearms(tmp_path: Path, mock: MockModel,
                                                 git: bool) -> None:
    binary = codex_bin()
    project, fm_home = tmp_path / "proj", tmp_path / "fmhome"
    project.mkdir()
    (tmp_path / "user" / ".codex").mkdir(parents=True)
    env = _env(tmp_path, mock, fm_home)
    if git:
        # The project's .codex/hooks.json is the team's: the hook goes into the user's
        # ~/.codex/hooks.json, keyed to this project, and Codex runs it from there.
        subprocess.run(["git", "init", "-q", str(project)], check=True, env=env)
    installed = _fm(env, "install", "codex", "--project", str(project), "--parked")
    assert installed.returncode == 0, installed.stderr
    user_hooks = tmp_path / "user" / ".codex" / "hooks.json"
    assert user_hooks.exists() == git and (project / ".codex" / "hooks.json").exists() != git
    if git:
        assert f"--project {project}" in user_hooks.read_text()
    added = _fm(env, "crew", "add", "alpha", "--pane", "%0")
    assert added.returncode == 0, added.stderr
    (tmp_path / "user" / ".codex" / "config.toml").write_text(f'''\
model = "mock-model"
model_provider = "mock"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
[model_providers.mock]
name = "Mock"
base_url = "{mock.base_url}"
env_key = "MOCK_API_KEY"
wire_api = "responses"
[projects."{project}"]
trust_level = "trusted"
''')
    log = open(tmp_path / "codex.log", "wb")  # noqa: SIM115 - closed in finally
    codex = subprocess.Popen([str(binary), "exec", "--dangerously-bypass-hook-trust",
                              "--skip-git-repo-check", "say hi"],
                             cwd=project, env=env, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def diag() -> str:
            return (tmp_path / "codex.log").read_text(errors="replace")[-3000:]

        first = eventually("the parked Stop hook's watcher", lambda: _watcher(env), deadline=DEADLINE)
        assert codex.poll() is None, diag()
        one = f"WAKE-ONE-{uuid.uuid4().hex[:8]}"
        assert _fm(env, "wake", "append", "signal", "e2e-one", one).returncode == 0
        eventually(f"the mock to receive {one}", lambda: mock.seen(one), deadline=DEADLINE)
        second = eventually("a successor watcher holding the lock",
                            lambda: (p := _watcher(env)) not in (None, first) and p, deadline=DEADLINE)
        # The next Stop re-parks by attaching to that successor; a wake landing before the
        # re-park would reach Codex as a drain reminder (check: rearm-resurface), not its text.
        eventually("the re-parked Stop hook attaching", lambda: _attached(fm_home, second), deadline=DEADLINE)
        two = f"WAKE-TWO-{uuid.uuid4().hex[:8]}"
        assert _fm(env, "wake", "append", "signal", "e2e-two", two).returncode == 0
        eventually(f"the mock to receive {two} (re-arm)", lambda: mock.seen(two), deadline=DEADLINE)
        eventually("a second successor watcher",
                   lambda: (p := _watcher(env)) not in (None, first, second) and p, deadline=DEADLINE)
        assert any("FIRSTMATE_OP" in body and one in body for body in mock.bodies())
    finally:
        with contextlib.suppress(OSError):
            os.killpg(codex.pid, signal.SIGTERM)
        try:
            codex.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(codex.pid, signal.SIGKILL)
            codex.wait(timeout=20)
        log.close()
        _fm(env, "arm", "--stop")


def test_app_server_mode_wakes_an_idle_thread_and_rearms(tmp_path: Path, mock: MockModel) -> None:
    binary = codex_bin()
    project, fm_home = tmp_path / "proj", tmp_path / "fmhome"
    project.mkdir()
    (tmp_path / "user" / ".codex").mkdir(parents=True)
    env = _env(tmp_path, mock, fm_home)
    installed = _fm(env, "install", "codex", "--project", str(project), "--app-server")
    assert installed.returncode == 0, installed.stderr
    assert "fm codex-serve" in installed.stdout + installed.stderr
    assert _fm(env, "crew", "add", "alpha", "--pane", "%0").returncode == 0
    (tmp_path / "user" / ".codex" / "config.toml").write_text(f'''\
model = "mock-model"
model_provider = "mock"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
[model_providers.mock]
name = "Mock"
base_url = "{mock.base_url}"
env_key = "MOCK_API_KEY"
wire_api = "responses"
[projects."{project}"]
trust_level = "trusted"
''')
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed in finally
    serve = subprocess.Popen([sys.executable, "-m", "firstmate", "codex-serve", "--cwd",
                              str(project), "--prompt", "say hi", "--codex", str(binary)],
                             env=env, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def diag() -> str:
            return (tmp_path / "serve.log").read_text(errors="replace")[-3000:]

        eventually("the first turn at the mock", lambda: mock.seen("say hi"), deadline=DEADLINE)
        first = eventually("the served thread's watcher", lambda: _watcher(env), deadline=DEADLINE)
        assert serve.poll() is None, diag()
        one = f"WAKE-AS-ONE-{uuid.uuid4().hex[:8]}"
        assert _fm(env, "wake", "append", "signal", "e2e-one", one).returncode == 0
        eventually(f"the mock to receive {one} as a new turn", lambda: mock.seen(one), deadline=DEADLINE)
        second = eventually("a successor watcher holding the lock",
                            lambda: (p := _watcher(env)) not in (None, first) and p, deadline=DEADLINE)
        two = f"WAKE-AS-TWO-{uuid.uuid4().hex[:8]}"
        assert _fm(env, "wake", "append", "signal", "e2e-two", two).returncode == 0
        eventually(f"the mock to receive {two} (re-arm)", lambda: mock.seen(two), deadline=DEADLINE)
        eventually("a second successor watcher",
                   lambda: (p := _watcher(env)) not in (None, first, second) and p, deadline=DEADLINE)
        assert "codex-serve: thread " in diag()
    finally:
        with contextlib.suppress(OSError):
            os.killpg(serve.pid, signal.SIGTERM)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait(timeout=20)
        log.close()
        _fm(env, "arm", "--stop")
