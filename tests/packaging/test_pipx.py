"""The install route the READMEs give every harness's users, run with the real pipx on the wheels
built here: ``pipx install --include-deps firstmate-plugin-claude`` exposes ``fm`` and the
plugin's ``firstmate-claude`` app, ``fm install claude`` writes hooks that run that venv's ``fm``
by absolute path, and the Claude Code plugin's launcher, as pipx installed it, finds ``fm`` with
no PATH to help it. Without ``--include-deps`` pipx exposes only the app, which is the whole
``fm``, and the launcher finds the ``fm`` inside the venv.

pipx fetches the core's dependencies (attrs, pluggy, …) from the package index; the core itself
comes from the wheel built here. Skipped when pipx is not installed (``tox -e dist`` has it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dists import REQUIRE_ENV, Built

pytestmark = pytest.mark.timeout(900)
VENV = Path("venvs/firstmate-plugin-claude")


def pipx() -> list[str]:
    import importlib.util

    if importlib.util.find_spec("pipx") is not None:
        return [sys.executable, "-m", "pipx"]
    found = shutil.which("pipx")
    if found:
        return [found]
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{REQUIRE_ENV} is set but pipx is not installed")
    pytest.skip("pipx is not installed (tox -e dist installs it)")


def user_env(home: Path) -> dict[str, str]:
    """A user with nothing on PATH but the system, and pipx's defaults under *home*."""
    keep = {k: v for k, v in os.environ.items()
            if k.startswith(("PIP_", "LANG", "LC_", "TMPDIR")) or k in ("PATH",)}
    return {**keep, "HOME": str(home), "PIPX_HOME": str(home / ".local/share/pipx"),
            "PIPX_BIN_DIR": str(home / ".local/bin"), "PIPX_MAN_DIR": str(home / ".local/share/man")}


def install(built: list[Built], home: Path, *flags: str) -> dict[str, str]:
    [core] = [dist for dist in built if not dist.harness]
    [claude] = [dist for dist in built if dist.harness == "claude"]
    env = user_env(home)
    done = subprocess.run([*pipx(), "install", *flags, "--preinstall", str(core.wheel),
                           str(claude.wheel)], env=env, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return env


def launcher(home: Path) -> Path:
    [path] = (home / ".local/share/pipx" / VENV / "lib").glob(
        "python*/site-packages/firstmate_plugin_claude/claude_plugin/bin/firstmate-hook")
    return path


def session_start(home: Path, tmp: Path, path: str) -> subprocess.CompletedProcess[str]:
    """The launcher as Claude runs it: a SessionStart payload on stdin, only *path* on PATH."""
    project = tmp / "project"
    project.mkdir(exist_ok=True)
    payload = json.dumps({"session_id": "s", "hook_event_name": "SessionStart",
                          "source": "startup", "cwd": str(project)})
    env = {"HOME": str(home), "PATH": path, "FM_HOME": str(tmp / "fmhome"),
           "CLAUDE_PROJECT_DIR": str(project)}
    return subprocess.run([str(launcher(home)), "claude", "session-start"], input=payload,
                          env=env, capture_output=True, text=True, timeout=60, check=False)


def test_pipx_include_deps_exposes_fm_and_the_app(built: list[Built], tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = install(built, home, "--include-deps")
    bindir = home / ".local/bin"
    assert {p.name for p in bindir.iterdir()} == {"fm", "firstmate-claude"}
    for app in ("fm", "firstmate-claude"):
        done = subprocess.run([str(bindir / app), "--version"], env=env, capture_output=True,
                              text=True, timeout=60, check=False)
        assert (done.returncode, done.stdout) == (0, "fm 0.1.0\n"), (app, done.stderr)
    project = tmp_path / "project"
    project.mkdir()
    done = subprocess.run([str(bindir / "fm"), "install", "claude", "--project", str(project)],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    hooks = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]
    command = hooks["Stop"][0]["hooks"][0]["command"]
    assert command == f"{home / '.local/share/pipx' / VENV / 'bin' / 'fm'} hook claude stop"
    # The plugin directory pipx installed: its launcher is executable and finds ~/.local/bin/fm.
    done = session_start(home, tmp_path, "/nonexistent")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_pipx_without_include_deps_exposes_the_app_and_the_launcher_finds_the_venv_fm(
        built: list[Built], tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = install(built, home)
    bindir = home / ".local/bin"
    assert {p.name for p in bindir.iterdir()} == {"firstmate-claude"}
    done = subprocess.run([str(bindir / "firstmate-claude"), "help"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "install" in done.stdout, done.stderr
    done = session_start(home, tmp_path, "/nonexistent")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    # With the venv's fm gone as well, the one line saying what to install.
    (home / ".local/share/pipx" / VENV / "bin" / "fm").unlink()
    done = session_start(home, tmp_path, "/nonexistent")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", (
        "firstmate: no fm found (FIRSTMATE_FM, PATH, pipx); install it with: "
        "pipx install --include-deps firstmate-plugin-claude\n"))
