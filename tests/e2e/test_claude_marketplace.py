"""End to end, the Claude Code plugin route: the real Claude Code (npm ``@anthropic-ai/claude-code``)
adds this checkout as a plugin marketplace (``.claude-plugin/marketplace.json``), installs the
``firstmate`` plugin from it, and a session started with nothing else set up (no
``fm install claude``) is supervised through the plugin's own hooks: its launcher finds ``fm``,
the SessionStart hook takes the session lock, the Stop hook arms the watcher, and a wake reaches
the loopback mock model API.

Skips without node/npm (the listing part) or tmux (the live session), like test_claude_e2e.py,
whose mock, cache and helpers it shares.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_claude_e2e import (
    CONTEXT,
    REPO,
    Mock,
    capture,
    claude_bin,
    eventually,
    fm,
    fm_shim,
    healthy_watcher,
    tmux_session,
)

pytestmark = [
    pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                       reason="node/npm are not installed: the real Claude Code cannot run"),
    pytest.mark.timeout(300),
]

MARKETPLACE = json.loads((REPO / ".claude-plugin" / "marketplace.json").read_text())
PLUGIN_ID = f"firstmate@{MARKETPLACE['name']}"


def scratch_home(path: Path, project: Path | None = None) -> Path:
    path.mkdir(parents=True)
    projects = {str(project): {"hasTrustDialogAccepted": True}} if project else {}
    (path / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True, "theme": "dark", "projects": projects,
        "customApiKeyResponses": {"approved": ["sk-dummy"], "rejected": []},
    }))
    return path


def claude_cli(claude: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "LANG": os.environ.get("LANG", "C.UTF-8")}
    return subprocess.run([str(claude), *args], env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, check=False, cwd=home)


def install_from_marketplace(claude: Path, home: Path) -> dict[str, object]:
    """``claude plugin marketplace add <checkout>`` and ``claude plugin install firstmate@…``;
    returns the installed plugin's entry from ``claude plugin list --json``."""
    for args in (("plugin", "marketplace", "add", str(REPO)), ("plugin", "install", PLUGIN_ID)):
        done = claude_cli(claude, home, *args)
        assert done.returncode == 0, f"claude {' '.join(args)}: {done.stdout}{done.stderr}"
    listed = claude_cli(claude, home, "plugin", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    entries = {entry["id"]: entry for entry in json.loads(listed.stdout)}
    assert PLUGIN_ID in entries, listed.stdout
    entry: dict[str, object] = entries[PLUGIN_ID]
    return entry


def test_claude_validates_adds_and_installs_the_marketplace(tmp_path: Path) -> None:
    claude = claude_bin()
    home = scratch_home(tmp_path / "userhome")
    done = claude_cli(claude, home, "plugin", "validate", str(REPO))
    assert done.returncode == 0 and "Validation passed" in done.stdout, done.stdout + done.stderr
    entry = install_from_marketplace(claude, home)
    source = REPO / MARKETPLACE["plugins"][0]["source"]
    manifest = json.loads((source / ".claude-plugin" / "plugin.json").read_text())
    assert entry["enabled"] is True and entry["version"] == manifest["version"]
    # Claude installs a copy: the launcher is still executable there and the hooks are ours.
    installed = Path(str(entry["installPath"]))
    launcher = installed / "bin" / "firstmate-hook"
    assert launcher.is_file() and os.access(launcher, os.X_OK)
    assert (json.loads((installed / "hooks" / "hooks.json").read_text())
            == json.loads((source / "hooks" / "hooks.json").read_text()))


@pytest.mark.skipif(shutil.which("tmux") is None,
                    reason="tmux is not installed: the Claude TUI cannot be driven")
def test_a_session_with_only_the_marketplace_plugin_is_supervised(tmp_path: Path) -> None:
    claude = claude_bin()
    project = tmp_path / "project"
    project.mkdir()
    user = scratch_home(tmp_path / "userhome", project)
    home = tmp_path / "fmhome"
    bindir = tmp_path / "bin"
    fm_shim(bindir)  # fm on the PATH Claude runs hooks with, as pip/pipx would put it
    install_from_marketplace(claude, user)
    pythonpath = os.pathsep.join([str(REPO / "core"), str(REPO / "plugins" / "claude" / "src"),
                                  *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    base_env = {
        "HOME": str(user),
        "PATH": os.pathsep.join([str(bindir), os.environ.get("PATH", "/usr/bin:/bin")]),
        "PYTHONPATH": pythonpath,
        "TERM": "xterm-256color",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "FM_HOME": str(home),
    }
    mock = Mock()
    claude_env = {**base_env, "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{mock.port}",
                  "ANTHROPIC_API_KEY": "sk-dummy", "DISABLE_AUTOUPDATER": "1",
                  "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    socket_name = f"fm-e2e-mp-{os.getpid()}"
    try:
        done = fm(base_env, "crew", "add", "builder", "--pane", "%9999", cwd=project)
        assert done.returncode == 0, done.stderr
        assert not (project / ".claude").exists()  # nothing but the plugin wires Claude in
        with tmux_session(socket_name, project, claude_env, [str(claude)]) as target:
            calls = bindir / "calls.log"
            CONTEXT[:] = [
                lambda: "hook calls: " + (calls.read_text()[-1500:] if calls.exists() else "none"),
                lambda: "pane: " + capture(socket_name, target)[-1500:],
            ]
            eventually("the Claude prompt", lambda: "❯" in capture(socket_name, target))
            eventually("the plugin's SessionStart hook's session lock",
                       lambda: "held by live harness" in fm(base_env, "lock", "status").stdout)
            assert "hook claude session-start" in calls.read_text()
            subprocess.run(["tmux", "-L", socket_name, "send-keys", "-t", target,
                            "hello from the marketplace test", "Enter"], check=True)
            eventually("the first turn at the mock", lambda: mock.seen("hello from the marketplace"))
            assert mock.seen("Firstmate supervises the crews of this home")
            eventually("a watcher armed by the plugin's Stop hook", lambda: healthy_watcher(base_env))
            fm(base_env, "wake", "append", "signal", "builder", "signal: builder done: E2E-MP-WAKE")
            eventually("the wake at the mock", lambda: mock.seen("E2E-MP-WAKE"))
            assert "hook claude stop" in calls.read_text()
    finally:
        fm(base_env, "arm", "--stop")
        mock.close()
