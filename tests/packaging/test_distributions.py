"""Every distribution in the repository (the core, the seven harness plugins and the plugin
template) builds offline into an sdist and a wheel that a package index takes as they are:
``twine check --strict`` passes, the MIT license text is inside both, the metadata says what the
project is (classifiers, keywords naming the harness, the README as a Markdown page whose links
resolve inside the sdist), each plugin depends on the core's 0.1 contract and brings its
``firstmate-<harness>`` app, and the core installs nothing but its package and ``fm``.

Runs in ``tox -e dist`` (which installs build, twine and setuptools>=77); elsewhere it is
skipped when those are missing. The builds are the session's (conftest.py), shared with
test_pipx.py.
"""

from __future__ import annotations

import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dists import LICENSE, REPO, Built, pyproject

pytestmark = pytest.mark.timeout(900)

CLASSIFIERS = {
    "Development Status :: 3 - Alpha",
    "Environment :: Console",
    "Intended Audience :: Developers",
    "Operating System :: POSIX",
    "Programming Language :: Python :: 3.11",
    "Programming Language :: Python :: 3.12",
    "Programming Language :: Python :: 3.13",
    "Topic :: Software Development",
}
#: Kept off the index: the template (a copy for a new harness drops it).
PRIVATE = "Private :: Do Not Upload"
#: A Markdown link or image: [text](target).
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)[^)]*\)")


def plugins(built: list[Built]) -> list[Built]:
    return [dist for dist in built if dist.harness]


def test_every_distribution_builds_and_passes_twine_check_strict(built: list[Built]) -> None:
    assert [dist.name for dist in built][:1] == ["firstmate"]
    assert len(plugins(built)) == len(built) - 1 >= 8  # seven harnesses and the template
    files = [str(path) for dist in built for path in (dist.sdist, dist.wheel)]
    done = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *files],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == len(files), done.stdout


def test_the_license_text_is_inside_every_sdist_and_wheel(built: list[Built]) -> None:
    for dist in built:
        assert dist.sdist_text("LICENSE") == LICENSE, dist.sdist.name
        assert dist.wheel_text(".dist-info/licenses/LICENSE") == LICENSE, dist.wheel.name
        meta = dist.metadata()
        assert meta["License-Expression"] == "MIT", dist.name
        assert meta.get_all("License-File") == ["LICENSE"], dist.name
    assert "MIT License" in LICENSE and "Firstmate contributors" in LICENSE


def test_the_metadata_says_what_each_distribution_is(built: list[Built]) -> None:
    for dist in built:
        meta = dist.metadata()
        classifiers = set(meta.get_all("Classifier") or [])
        assert classifiers >= CLASSIFIERS, (dist.name, CLASSIFIERS - classifiers)
        assert (PRIVATE in classifiers) == (dist.folder.name == "_template"), dist.name
        assert meta["Requires-Python"] == ">=3.11", dist.name
        assert meta["Description-Content-Type"] == "text/markdown", dist.name
        keywords = {word.strip() for word in (meta["Keywords"] or "").split(",")}
        assert "firstmate" in keywords or not dist.harness, (dist.name, keywords)
        if dist.harness:
            assert dist.harness in keywords, (dist.name, keywords)
        # The page is the README, and it is not empty.
        readme = (dist.folder / "README.md").read_text()
        page = meta.get_payload(decode=True)
        assert isinstance(page, bytes) and page.decode().strip() == readme.strip(), dist.name


def test_every_readme_link_resolves_inside_its_sdist(built: list[Built]) -> None:
    for dist in built:
        names = set(dist.sdist_names())
        readme = dist.sdist_text("README.md")
        for target in LINK.findall(readme):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # an absolute URL or an anchor in the page
            path = target.split("#", 1)[0]
            assert path in names, f"{dist.name}: README links to {target}, not in the sdist"
        # The core's README names documents in plain text: they ship in its sdist.
        if not dist.harness:
            for doc in set(re.findall(r"docs/[a-z0-9_/-]+\.md", readme)):
                assert doc in names, f"README names {doc}, which its sdist lacks"


def test_plugins_depend_on_the_core_0_1_contract(built: list[Built]) -> None:
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    for dist in plugins(built):
        found = [Requirement(line) for line in dist.metadata().get_all("Requires-Dist") or []]
        [core] = [req for req in found if req.name == "firstmate"]
        assert core.specifier == SpecifierSet(">=0.1.0,<0.2"), (dist.name, str(core))
        assert "0.1.9" in core.specifier and "0.2.0" not in core.specifier


def test_plugin_wheels_bring_their_app_and_their_entry_point(built: list[Built]) -> None:
    for dist in plugins(built):
        points = dist.wheel_text(".dist-info/entry_points.txt")
        assert f"[console_scripts]\nfirstmate-{dist.harness} = firstmate.cli.app:main\n" in points, (
            dist.name, points)
        assert f"[firstmate.plugins]\n{dist.harness} = " in points, (dist.name, points)


def test_the_core_installs_its_package_and_fm_only(built: list[Built]) -> None:
    [core] = [dist for dist in built if not dist.harness]
    tops = {name.split("/", 1)[0] for name in core.wheel_names()}
    assert tops == {"firstmate", "firstmate-0.1.0.dist-info", "firstmate-0.1.0.data"}, tops
    names = core.wheel_names()
    assert "firstmate-0.1.0.data/scripts/fm" in names
    assert "firstmate/shims/bridge-client.mjs" in names
    # The documents the README names ship in the sdist.
    assert "docs/cli.md" in core.sdist_names()


def test_the_claude_wheel_ships_its_plugin_directory_with_an_executable_launcher(
        built: list[Built]) -> None:
    import zipfile

    [claude] = [dist for dist in built if dist.harness == "claude"]
    root = "firstmate_plugin_claude/claude_plugin/"
    with zipfile.ZipFile(claude.wheel) as archive:
        names = set(archive.namelist())
        assert {root + ".claude-plugin/plugin.json", root + "hooks/hooks.json"} <= names
        mode = archive.getinfo(root + "bin/firstmate-hook").external_attr >> 16
    assert stat.S_IMODE(mode) & 0o111 == 0o111, oct(mode)


def test_shim_wheels_ship_their_shim_and_not_the_client_link(built: list[Built]) -> None:
    shims = {"pi": "shim/index.ts", "omp": "shim/index.ts", "opencode": "shim/firstmate.js"}
    for dist in plugins(built):
        if dist.harness not in shims:
            continue
        names = dist.wheel_names()
        assert f"firstmate_plugin_{dist.harness}/{shims[dist.harness]}" in names
        # The client is core's (firstmate/shims/bridge-client.mjs): the link beside the shim is
        # for the npm package layout only.
        assert not [n for n in names if n.endswith("bridge-client.mjs")], dist.name


def test_crew_wheels_ship_their_crew_mode_files(built: list[Built]) -> None:
    """What ``fm crew spawn`` writes for a crew's own session comes from the installed plugin,
    or, for the crew extension Pi and omp share, from the core that ships it once."""
    [core] = [dist for dist in built if not dist.harness]
    assert "firstmate/shims/crew-extension.ts" in core.wheel_names()
    crews = {"opencode": "crew/firstmate-crew.js"}
    for dist in plugins(built):
        names = dist.wheel_names()
        if dist.harness in crews:
            assert f"firstmate_plugin_{dist.harness}/{crews[dist.harness]}" in names
        assert not [n for n in names if n.endswith("crew.ts")], dist.name


def test_versions_agree(built: list[Built]) -> None:
    versions = {dist.name: dist.metadata()["Version"] for dist in built}
    assert set(versions.values()) == {str(pyproject(REPO)["version"])}, versions
