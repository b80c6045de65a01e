"""``fm plugin add|remove|list`` as a user runs them, the message of a plugin installed in another
environment, and the ``firstmate-<harness>`` app. The real pip runs here, offline, into a venv
of the test's own (a wheel made here); pipx and uv run in tests/packaging/test_pipx.py."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shlex
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest
from firstmate.testing.sites import declare

DEADLINE = 120.0
CORE = str(Path(__file__).resolve().parents[2] / "core")

PLUGIN = """
from firstmate import hookimpl
from firstmate.plugin.harness import HarnessInfo


class P:
    @hookimpl
    def firstmate_harness_info(self):
        return HarnessInfo(name="{name}", display_name="The {name} harness", family="hook",
                           rearm_owner="hook", wake_channel="test")


plugin = P()
"""


def installed_dist(site: Path, harness: str, version: str = "1.0") -> None:
    """An installed plugin distribution on *site* (a PYTHONPATH entry)."""
    module = f"firstmate_plugin_{harness}"
    (site / f"{module}.py").write_text(textwrap.dedent(PLUGIN.format(name=harness)))
    declare(site, harness, module, dist=f"firstmate-plugin-{harness}", version=version)


def wheel(folder: Path, harness: str, version: str = "0.3.0") -> Path:
    """A real wheel of a plugin, made by hand (no build tools, no index)."""
    module = f"firstmate_plugin_{harness}"
    info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": textwrap.dedent(PLUGIN.format(name=harness)),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: firstmate-plugin-{harness}\n"
                            f"Version: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                         "Tag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[firstmate.plugins]\n{harness} = {module}:plugin\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    path = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture
def site(tmp_path: Path) -> Path:
    path = tmp_path / "site"
    path.mkdir()
    installed_dist(path, "fakea")
    return path


def user_env(tmp_path: Path, site: Path) -> dict[str, str]:
    """No harness plugin but those on *site*; pipx and uv homes under a HOME of the test's own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FM_", "FIRSTMATE_", "PIPX_", "UV_", "XDG_"))}
    env.update(HOME=str(tmp_path / "user"), FM_HOME=str(tmp_path / "fmhome"),
               FIRSTMATE_PLUGINS="fakea,acme",
               PYTHONPATH=os.pathsep.join([str(site), CORE, *sys.path[1:]]))
    return env


def fm(env: dict[str, str], *args: str, python: str = sys.executable,
       cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "firstmate", *args], capture_output=True, text=True,
                          env=env, timeout=DEADLINE, check=False, stdin=subprocess.DEVNULL, cwd=cwd)


def pip_of(python: str) -> str:
    return shlex.join([os.path.abspath(python), "-m", "pip"])


def test_add_prints_the_command_it_would_run_for_a_name_a_wheel_and_a_checkout(
        tmp_path: Path, site: Path) -> None:
    env = user_env(tmp_path, site)
    pip = pip_of(sys.executable)
    done = fm(env, "plugin", "add", "acme", "--dry-run")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"fm plugin: would run: {pip} install firstmate-plugin-acme\n"
    built = wheel(tmp_path, "acme")
    done = fm(env, "plugin", "add", str(built), "--dry-run")
    assert done.stdout == f"fm plugin: would run: {pip} install {built}\n"
    checkout = tmp_path / "my checkout"
    checkout.mkdir()
    (checkout / "pyproject.toml").write_text('[project]\nname = "firstmate-plugin-acme"\n')
    done = fm(env, "plugin", "add", str(checkout), "--dry-run")
    assert done.stdout == f"fm plugin: would run: {pip} install '{checkout}'\n"
    assert fm(env, "plugin", "list").stdout.count("\n") == 2  # nothing was installed


@pytest.mark.parametrize(("word", "why"), [
    ("Bad Name", "'Bad Name' is not a harness name"),
    ("./nowhere", "no such file or directory"),
    ("NOTAPLUGIN", "is not a Firstmate plugin (its distribution is 'other-tool')"),
    ("./x\ny\x1b[2J", "no such file or directory: '"),
])
def test_add_refuses_what_is_no_plugin_in_one_line(tmp_path: Path, site: Path, word: str,
                                                   why: str) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "pyproject.toml").write_text('[project]\nname = "other-tool"\n')
    word = str(tmp_path / "other") if word == "NOTAPLUGIN" else word
    done = fm(user_env(tmp_path, site), "plugin", "add", word, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.count("\n") == 1 and why in done.stderr and "\x1b" not in done.stderr


def test_add_leaves_an_installed_plugin_alone_and_remove_names_what_is_there(
        tmp_path: Path, site: Path) -> None:
    env = user_env(tmp_path, site)
    done = fm(env, "plugin", "add", "fakea")
    assert done.returncode == 0 and done.stdout.startswith(
        "fm plugin: fakea is already installed (firstmate-plugin-fakea 1.0, the Python "
        "environment ")
    missing = fm(env, "plugin", "remove", "fake")
    assert missing.returncode == 5 and missing.stdout == ""
    assert "firstmate-plugin-fake is not installed in this fm's environment" in missing.stderr
    assert "did you mean 'fakea'? fm plugin list shows what is" in missing.stderr
    dry = fm(env, "plugin", "remove", "fakea", "--dry-run")
    assert (dry.returncode, dry.stdout) == (0, f"fm plugin: would run: {pip_of(sys.executable)} "
                                               "uninstall -y firstmate-plugin-fakea\n")


def other_pipx_venv(tmp_path: Path, harness: str, source: Path) -> Path:
    venv_dir = tmp_path / "user/.local/share/pipx/venvs" / f"firstmate-plugin-{harness}"
    (venv_dir / "pipx_metadata.json").parent.mkdir(parents=True)
    (venv_dir / "pipx_metadata.json").write_text("{}")
    info = venv_dir / f"lib/python3.11/site-packages/firstmate_plugin_{harness}-0.3.0.dist-info"
    info.mkdir(parents=True)
    (info / "entry_points.txt").write_text(f"[firstmate.plugins]\n{harness} = m:plugin\n")
    (info / "direct_url.json").write_text(json.dumps({"url": source.as_uri(), "archive_info": {}}))
    return venv_dir


def test_a_plugin_in_another_environment_is_named_with_the_command_that_brings_it_here(
        tmp_path: Path, site: Path) -> None:
    env = user_env(tmp_path, site)
    built = wheel(tmp_path, "acme")
    other = other_pipx_venv(tmp_path, "acme", built)
    project = tmp_path / "project"
    project.mkdir()
    done = fm(env, "install", "acme", "--project", str(project))
    assert (done.returncode, done.stdout) == (5, "")
    assert done.stderr.startswith(f"fm: the acme plugin is installed in pipx venv "
                                  f"firstmate-plugin-acme ({other}), not in this fm's environment")
    assert done.stderr.endswith(f"; bring it here with: fm plugin add {built}\n")
    assert done.stderr.count("\n") == 1 and list(project.iterdir()) == []
    listed = fm(env, "plugin", "list")
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert lines[0].startswith("fm plugin: fm 0.1.0 in the Python environment ")
    assert lines[1].startswith("fakea\t1.0\thook\tre-arm: hook\tThe fakea harness")
    assert lines[2] == (f"fm plugin: acme 0.3.0 is installed in pipx venv firstmate-plugin-acme "
                        f"({other}), which this fm does not load; bring it here with: "
                        f"fm plugin add {built}")
    data = json.loads(fm(env, "plugin", "list", "--json").stdout)
    assert data["fm"]["installer"] == "pip" and [p["name"] for p in data["plugins"]] == ["fakea"]
    assert data["elsewhere"] == [{"harness": "acme", "version": "0.3.0", "kind": "pipx venv",
                                  "environment": str(other), "source": str(built),
                                  "command": f"fm plugin add {built}"}]


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv fm runs from, with pip (ensurepip: offline); each test leaves it as it found it."""
    path = tmp_path_factory.mktemp("fm") / "own venv"
    venv.create(path, with_pip=True)
    return path


def test_pip_adds_lists_and_removes_a_wheel_in_fms_own_environment(tmp_path: Path, site: Path,
                                                                    own: Path) -> None:
    python = str(own / "bin" / "python")
    env = user_env(tmp_path, site)
    built = wheel(tmp_path, "acme")
    done = fm(env, "plugin", "add", str(built), python=python)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"fm plugin: running: {pip_of(python)} install {built}",
        f"fm plugin: added acme (firstmate-plugin-acme 0.3.0) to the Python environment {own}; "
        "next: fm install acme in your project"]
    assert [p.name for p in (own / "lib").glob("python3*/site-packages/firstmate_plugin_acme")]
    assert "\nacme\t0.3.0\thook" in fm(env, "plugin", "list", python=python).stdout
    gone = fm(env, "plugin", "remove", "acme", python=python)
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout.splitlines()[0] == (f"fm plugin: running: {pip_of(python)} uninstall -y "
                                           "firstmate-plugin-acme")
    assert not list((own / "lib").glob("python3*/site-packages/firstmate_plugin_acme"))


def test_a_failing_installer_is_one_line_with_its_command(tmp_path: Path, site: Path,
                                                          own: Path) -> None:
    broken = tmp_path / "firstmate_plugin_acme-0.3.0-py3-none-any.whl"
    broken.write_bytes(b"not a zip")
    done = fm(user_env(tmp_path, site), "plugin", "add", str(broken),
              python=str(own / "bin" / "python"))
    assert done.returncode == 1
    last = done.stderr.splitlines()[-1]
    assert last.startswith("fm: the installer failed (exit ") and f"install {broken};" in last


def test_the_harness_app_says_what_it_is_and_points_at_fm(tmp_path: Path, site: Path) -> None:
    env = user_env(tmp_path, site)
    code = ("import sys; sys.argv[0] = '/x/bin/firstmate-fakea'; "
            "from firstmate.cli.app import main; raise SystemExit(main())")

    def app(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              text=True, env=env, timeout=DEADLINE, check=False)

    helped = app("--help")
    text = " ".join(helped.stdout.split())
    assert (helped.returncode, helped.stderr) == (0, "")
    assert text.startswith("firstmate-fakea is the command of firstmate-plugin-fakea 1.0, the "
                           "Firstmate plugin for The fakea harness.")
    assert "Use fm itself: fm install fakea wires The fakea harness into a project" in text
    bare = app()
    assert (bare.returncode, bare.stdout) == (2, helped.stdout)
    version = app("--version")
    assert (version.returncode, version.stdout) == (0, "fm 0.1.0\n")  # with arguments: fm
    assert app("help").stdout.startswith("usage: fm ")
