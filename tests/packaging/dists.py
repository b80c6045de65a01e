"""What the packaging tests share: the repository's distributions and building them offline.

Each project is copied into a scratch directory and built there with ``python -m build
--no-isolation`` (an sdist, then the wheel from that sdist, so a file the sdist forgets fails
the wheel): nothing is fetched from an index, and nothing (no ``*.egg-info``) is written into
the checkout, where it would shadow the installed metadata of the tests that run from it.
"""

from __future__ import annotations

import email
import email.message
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest

REPO = Path(__file__).resolve().parents[2]
LICENSE = (REPO / "LICENSE").read_text()
#: Folder under plugins/ → harness name (the template's is its example harness).
PLUGIN_DIRS = sorted(p.parent for p in (REPO / "plugins").glob("*/pyproject.toml"))
#: Set in the tox env that builds: missing tools are then a failure, never a skip.
REQUIRE_ENV = "FM_TEST_REQUIRE_DIST"
#: The core's own files and folders its sdist is built from (pyproject.toml and MANIFEST.in say
#: what of them it takes).
CORE_FILES = ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in")
CORE_DIRS = ("core", "docs")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist",
                                "node_modules")


def pyproject(folder: Path) -> dict[str, object]:
    with (folder / "pyproject.toml").open("rb") as fh:
        project: dict[str, object] = tomllib.load(fh)["project"]
    return project


def harness_of(folder: Path) -> str:
    """The harness a plugin folder is for: its ``firstmate.plugins`` entry-point name."""
    points = pyproject(folder)["entry-points"]
    assert isinstance(points, dict)
    [name] = points["firstmate.plugins"]
    return str(name)


@attrs.frozen
class Built:
    """One distribution, built: its folder, its harness ("" for the core), sdist and wheel."""

    folder: Path
    harness: str
    sdist: Path
    wheel: Path

    @property
    def name(self) -> str:
        return str(pyproject(self.folder)["name"])

    def metadata(self) -> email.message.Message:
        with zipfile.ZipFile(self.wheel) as archive:
            [path] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
            return email.message_from_bytes(archive.read(path))

    def wheel_names(self) -> list[str]:
        with zipfile.ZipFile(self.wheel) as archive:
            return archive.namelist()

    def wheel_text(self, suffix: str) -> str:
        with zipfile.ZipFile(self.wheel) as archive:
            [path] = [n for n in archive.namelist() if n.endswith(suffix)]
            return archive.read(path).decode()

    def sdist_names(self) -> list[str]:
        """Paths inside the sdist, without its top folder."""
        with tarfile.open(self.sdist) as archive:
            return [m.name.split("/", 1)[1] for m in archive.getmembers() if "/" in m.name]

    def sdist_text(self, path: str) -> str:
        with tarfile.open(self.sdist) as archive:
            top = archive.getnames()[0].split("/", 1)[0]
            member = archive.extractfile(f"{top}/{path}")
            assert member is not None, f"{self.sdist.name} has no {path}"
            return member.read().decode()


def tools_missing() -> str | None:
    """Why this interpreter cannot build offline (a skip reason), or None."""
    for module in ("build", "twine"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (tox -e dist installs it)"
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return "setuptools is not installed"
    if int(version.split(".")[0]) < 77:
        return f"setuptools {version} is older than 77 (PEP 639 license fields)"
    return None


def require_tools() -> None:
    why = tools_missing()
    if why is None:
        return
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{REQUIRE_ENV} is set but {why}")
    pytest.skip(why)


def _copy(folder: Path, into: Path) -> Path:
    if folder == REPO:
        into.mkdir(parents=True)
        for name in CORE_FILES:
            shutil.copy2(REPO / name, into / name)
        for name in CORE_DIRS:
            shutil.copytree(REPO / name, into / name, ignore=IGNORE)
    else:
        shutil.copytree(folder, into, symlinks=True, ignore=IGNORE)
    return into


def _build(folder: Path, scratch: Path) -> Built:
    key = "core" if folder == REPO else folder.name
    source = _copy(folder, scratch / "src" / key)
    out = scratch / "dist" / key
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out),
                           str(source)], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, f"building {key} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    return Built(folder, "" if folder == REPO else harness_of(folder), sdist, wheel)


def build_all(scratch: Path) -> list[Built]:
    """The core and every folder under plugins/ (the template too), two builds at a time."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda folder: _build(folder, scratch), [REPO, *PLUGIN_DIRS]))
