"""The install routes the READMEs give, run with the real pipx (and uv, when installed) on the
wheels built here.

One install for any number of harnesses: ``pipx install firstmate`` (or ``uv tool install
firstmate``), then ``fm plugin add`` with each plugin's wheel injects it into fm's own venv, and
``fm install`` of each harness works in a git project. A plugin installed the older way, in a
pipx venv of its own, is named by ``fm install`` with the exact command that brings it in.

One harness on its own: ``pipx install --include-deps firstmate-plugin-claude`` exposes ``fm`` and
the plugin's ``firstmate-claude`` app, ``fm install claude`` writes hooks that run that venv's
``fm`` by absolute path, and the Claude Code plugin's launcher, as pipx installed it, finds ``fm``
with no PATH to help it. Without ``--include-deps`` pipx exposes only the app, which is the whole
``fm``, and the launcher finds the ``fm`` inside the venv.

pipx and uv fetch the core's dependencies (attrs, pluggy, …) from the package index; the core and
the plugins come from the wheels built here, and injecting a plugin's wheel fetches nothing (its
dependencies are already in the venv). Skipped when pipx is not installed (``tox -e dist`` has it,
and uv).
"""

from __future__ import annotations

import json
import os
import shlex
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


def user_env(home: Path, backend: str = "pip") -> dict[str, str]:
    """A user with nothing on PATH but the system, and pipx's defaults under *home*. pipx uses
    *backend* (newer pipx picks uv by itself when uv is installed; older ones have only pip)."""
    # The machine's index and certificate settings stay, as they would for its user.
    keep = {k: v for k, v in os.environ.items()
            if k.startswith(("PIP_", "UV_", "SSL_CERT_", "LANG", "LC_", "TMPDIR"))
            or k in ("PATH", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
    # uv reads its own certificate bundle unless told to trust the system's, as pip is told
    # through its config here; a user behind such a proxy sets this once.
    keep.setdefault("UV_NATIVE_TLS", "1")
    return {**keep, "HOME": str(home), "PIPX_HOME": str(home / ".local/share/pipx"),
            "PIPX_BIN_DIR": str(home / ".local/bin"), "PIPX_MAN_DIR": str(home / ".local/share/man"),
            "PIPX_DEFAULT_BACKEND": backend}


def install(built: list[Built], home: Path, *flags: str, harness: str = "claude",
            env: dict[str, str] | None = None) -> dict[str, str]:
    [core] = [dist for dist in built if not dist.harness]
    [plugin] = [dist for dist in built if dist.harness == harness]
    env = user_env(home) if env is None else env
    done = subprocess.run([*pipx(), "install", *flags, "--preinstall", str(core.wheel),
                           str(plugin.wheel)], env=env, capture_output=True, text=True,
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
    hooks = json.loads((project / ".claude" / "settings.local.json").read_text())["hooks"]
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
    # Asked what it is, the app says so and points at fm.
    done = subprocess.run([str(bindir / "firstmate-claude"), "--help"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and " ".join(done.stdout.split()).startswith(
        "firstmate-claude is the command of firstmate-plugin-claude 0.1.0, the Firstmate plugin "
        "for Claude Code. It is the whole fm command under the plugin's own name"), done.stdout
    done = session_start(home, tmp_path, "/nonexistent")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    # With the venv's fm gone as well, the one line saying what to install.
    (home / ".local/share/pipx" / VENV / "bin" / "fm").unlink()
    done = session_start(home, tmp_path, "/nonexistent")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", (
        "firstmate: no fm found (FIRSTMATE_FM, PATH, pipx); install it with: "
        "pipx install --include-deps firstmate-plugin-claude\n"))


# --- one install, any number of harnesses: fm plugin add ----------------------------------------


def uv_binary() -> str | None:
    """uv, from its package (``uv`` in the tox env) or PATH; None when it is not installed."""
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found,unused-ignore]

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def tools_on_path(env: dict[str, str], folder: Path) -> dict[str, str]:
    """*env* with ``pipx`` (and ``uv``, when installed) as commands on PATH, as a user has them:
    fm runs them by name."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "pipx"
    shim.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(w) for w in pipx()) + ' "$@"\n')
    shim.chmod(0o755)
    uv = uv_binary()
    if uv is not None:
        (folder / "uv").symlink_to(uv)
    return {**env, "PATH": f"{folder}{os.pathsep}{env.get('PATH', os.defpath)}"}


def run(env: dict[str, str], *argv: str | Path, cwd: Path | None = None,
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(word) for word in argv], env=env, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL, check=False, cwd=cwd)


def wheel_of(built: list[Built], harness: str) -> Path:
    [dist] = [dist for dist in built if dist.harness == harness]
    return dist.wheel


def git_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True, timeout=60)
    return project


def installs_both(env: dict[str, str], fm: Path, project: Path) -> None:
    """fm install claude and pi in *project* succeed, and fm plugin list shows both."""
    for harness, written in (("claude", ".claude/settings.local.json"),
                             ("pi", ".pi/extensions/firstmate/index.ts")):
        done = run(env, fm, "install", harness, cwd=project)
        assert done.returncode == 0, done.stderr
        assert (project / written).is_file()
    listed = run(env, fm, "plugin", "list").stdout.splitlines()
    assert [line.split("\t")[:2] for line in listed[1:3]] == [["claude", "0.1.0"],
                                                             ["pi", "0.1.0"]], listed


@pytest.mark.parametrize("backend", ["pip", "uv"])
def test_pipx_install_firstmate_then_fm_plugin_add_for_each_harness(
        built: list[Built], tmp_path: Path, backend: str) -> None:
    if backend == "uv" and uv_binary() is None:
        pytest.skip("uv is not installed (tox -e dist installs it)")
    home = tmp_path / "home"
    env = tools_on_path(user_env(home, backend), tmp_path / "tools")
    [core] = [dist for dist in built if not dist.harness]
    done = run(env, *pipx(), "install", core.wheel)
    assert done.returncode == 0, done.stdout + done.stderr
    bindir = home / ".local/bin"
    assert {p.name for p in bindir.iterdir()} == {"fm"}
    venv = home / ".local/share/pipx/venvs/firstmate"
    for harness in ("claude", "pi"):
        wheel = wheel_of(built, harness)
        done = run(env, bindir / "fm", "plugin", "add", wheel)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines() == [
            f"fm plugin: running: pipx inject firstmate {wheel}",
            f"fm plugin: added {harness} (firstmate-plugin-{harness} 0.1.0) to pipx venv "
            f"firstmate ({venv}); next: fm install {harness} in your project"]
    installs_both(env, bindir / "fm", git_project(tmp_path))
    gone = run(env, bindir / "fm", "plugin", "remove", "pi")
    assert gone.returncode == 0, gone.stderr
    assert "\npi\t" not in run(env, bindir / "fm", "plugin", "list").stdout


def test_a_plugin_in_another_pipx_venv_is_named_with_the_command_that_brings_it_in(
        built: list[Built], tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = tools_on_path(user_env(home), tmp_path / "tools")
    # The route the READMEs used to give, once per harness: two venvs, fm from the first.
    install(built, home, "--include-deps", env=env)
    install(built, home, harness="pi", env=env)
    fm = home / ".local/bin/fm"
    venvs = home / ".local/share/pipx/venvs"
    wheel = wheel_of(built, "pi")
    project = git_project(tmp_path)
    done = run(env, fm, "install", "pi", cwd=project)
    assert (done.returncode, done.stdout) == (5, "")
    assert done.stderr == (
        f"fm: the pi plugin is installed in pipx venv firstmate-plugin-pi "
        f"({venvs / 'firstmate-plugin-pi'}), not in this fm's environment (pipx venv "
        f"firstmate-plugin-claude ({venvs / 'firstmate-plugin-claude'})); bring it here with: "
        f"fm plugin add {wheel}\n")
    assert f"bring it here with: fm plugin add {wheel}" in run(env, fm, "plugin", "list").stdout
    # The command it names, run as given, brings it in.
    command = shlex.split(done.stderr.rpartition("bring it here with: ")[2])
    assert command[:3] == ["fm", "plugin", "add"]
    added = run(env, fm, *command[1:])
    assert added.returncode == 0, added.stdout + added.stderr
    installs_both(env, fm, project)


def test_uv_tool_install_firstmate_then_fm_plugin_add_for_each_harness(
        built: list[Built], tmp_path: Path) -> None:
    if uv_binary() is None:
        pytest.skip("uv is not installed (tox -e dist installs it)")
    home = tmp_path / "home"
    env = tools_on_path(user_env(home), tmp_path / "tools")
    env.update(UV_TOOL_DIR=str(home / ".local/share/uv/tools"),
               UV_TOOL_BIN_DIR=str(home / ".local/bin"))
    [core] = [dist for dist in built if not dist.harness]
    done = run(env, "uv", "tool", "install", core.wheel)
    assert done.returncode == 0, done.stdout + done.stderr
    fm = home / ".local/bin/fm"
    claude, pi = wheel_of(built, "claude"), wheel_of(built, "pi")
    assert run(env, fm, "plugin", "add", claude).returncode == 0
    done = run(env, fm, "plugin", "add", pi)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == (
        f"fm plugin: running: uv tool install {core.wheel} --with {claude} --with {pi}")
    installs_both(env, fm, git_project(tmp_path))
