"""End to end, the package routes: the real Pi, omp and OpenCode install Firstmate's shim as a
package with their own installers (``pi install DIR -l``, ``omp plugin install DIR``,
``opencode plugin DIR``), from the layout kept in this checkout (``plugins/<harness>/package.json``)
and from the tarball ``npm pack`` makes of it, with nothing written by ``fm install``. The shim
finds ``fm`` on the harness's PATH (the rig's logging wrapper), starts ``fm bridge <harness>``, and
a wake reaches the loopback mock model API.

Skipped only when node/npm are absent (OpenCode also needs git). The harness installs are cached
under ``.e2e-cache/``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from firstmate.testing.procs import eventually

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mock_api import MockApi
from rig import DEADLINE, REPO, Rig, needs_node, rig, rpc_first_turn, wake_reaches_model
from test_omp_inproc import start_omp
from test_opencode_inproc import opencode_bin, prepare, wake_through_serve
from test_pi_inproc import start_pi

pytestmark = [needs_node, pytest.mark.timeout(900)]
SOURCES = ["checkout", "npm-pack"]


def package(harness: str, source: str, scratch: Path) -> Path:
    """``plugins/<harness>`` itself, or ``npm pack`` of it unpacked: the package as a registry
    would hold it (a copy of the bridge client where the checkout has a link)."""
    if source == "checkout":
        return REPO / "plugins" / harness
    into = scratch / "pack"
    into.mkdir(parents=True)
    done = subprocess.run(["npm", "pack", "--silent", "--pack-destination", str(into)],
                          cwd=REPO / "plugins" / harness, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr
    [tarball] = into.glob("*.tgz")
    with tarfile.open(tarball) as archive:
        if hasattr(tarfile, "data_filter"):  # (Python 3.11.4 on; npm's own tarball before)
            archive.extractall(into, filter="data")
        else:
            archive.extractall(into)
    return into / "package"


def started_from_path(r: Rig) -> None:
    # A package has no launch.json: the shim found fm on the harness's PATH, the logging wrapper.
    assert r.bridge_calls(), f"the packaged shim never started fm bridge {r.harness} from PATH"
    assert not any((r.project / f".{r.harness}").glob("extensions/*")), "fm install ran"


@pytest.mark.parametrize("source", SOURCES)
def test_pi_package(tmp_path: Path, mock: MockApi, source: str) -> None:
    with rig(tmp_path, "pi") as r:
        pi = start_pi(r, mock, package=package("pi", source, tmp_path))
        first = rpc_first_turn(r, pi, mock)
        started_from_path(r)
        wake_reaches_model(r, pi, mock, first, f"PI-{source.upper()}")


def test_pi_package_without_the_python_side_says_what_to_install(tmp_path: Path,
                                                                   mock: MockApi) -> None:
    """No fm anywhere the shim looks: Pi still works, and shows one notice naming the pipx line."""
    with rig(tmp_path, "pi") as r:
        def no_fm() -> None:
            # Not the rig's fm, nor one the test runner's environment puts on PATH (tox's).
            (r.bindir / "fm").unlink()
            r.env["PATH"] = os.pathsep.join(
                d for d in r.env["PATH"].split(os.pathsep)
                if d and not any((Path(d) / name).exists() for name in ("fm", "firstmate-pi")))

        pi = start_pi(r, mock, package=package("pi", "checkout", tmp_path), before_start=no_fm)
        pi.send({"id": "p1", "type": "prompt", "message": "say hi"})
        eventually("the turn at the mock", lambda: mock.seen("say hi"), diag=r.diag, deadline=DEADLINE)
        eventually("the turn to end", lambda: pi.count("agent_end"), diag=r.diag, deadline=DEADLINE)

        def notices() -> list[str]:
            return [e.get("message", "") for e in pi.events()
                    if e.get("type") == "extension_ui_request" and e.get("method") == "notify"]

        eventually("the shim's notice", notices, diag=r.diag, deadline=DEADLINE)
        assert notices() == [
            "firstmate: fm not found, so fm bridge pi cannot start and supervision is off; "
            "install the Python side with: pipx install --include-deps firstmate-plugin-pi "
            "(or pip install firstmate-plugin-pi), then restart pi"], notices()
        assert not r.bridge_calls() and pi.proc.poll() is None, pi.diag()


@pytest.mark.parametrize("source", SOURCES)
def test_omp_plugin_package(tmp_path: Path, mock: MockApi, source: str) -> None:
    with rig(tmp_path, "omp") as r:
        omp = start_omp(r, mock, package=package("omp", source, tmp_path))
        first = rpc_first_turn(r, omp, mock)
        started_from_path(r)
        wake_reaches_model(r, omp, mock, first, f"OMP-{source.upper()}")


# The checkout only: OpenCode's first start with a path plugin spends about a minute resolving
# it, and the tarball's layout is the one the Pi and omp tests load (and tests/packaging checks).
@pytest.mark.skipif(shutil.which("git") is None,
                    reason="git is needed: the OpenCode project is a git checkout")
def test_opencode_plugin_package(tmp_path: Path, mock: MockApi) -> None:
    binary = opencode_bin()
    with rig(tmp_path, "opencode") as r:
        prepare(r, mock, install=False)
        where = package("opencode", "checkout", tmp_path)
        done = subprocess.run([str(binary), "plugin", str(where)], cwd=r.project, env=r.env,
                              capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert str(where) in (r.project / ".opencode" / "opencode.json").read_text()
        assert not (r.project / ".opencode" / "plugins").exists()
        wake_through_serve(r, mock, binary, tmp_path)
        assert r.bridge_calls(), "the packaged shim never started fm bridge opencode from PATH"
