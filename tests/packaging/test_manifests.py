"""The files harnesses' own installers read, checked without building anything: the license copies,
the Claude Code marketplace (``.claude-plugin/marketplace.json``) and its plugin, and the npm
package layouts of the Pi, omp and OpenCode shims (``plugins/<harness>/package.json``), including
what ``npm pack`` makes of them when npm is here.

The real binaries run these routes in tests/e2e/test_claude_marketplace.py and
tests/e2e_inproc/test_packages_inproc.py; this file keeps the manifests honest everywhere else.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dists import LICENSE, PLUGIN_DIRS, REPO, harness_of, pyproject

VERSION = str(pyproject(REPO)["version"])
CLIENT = REPO / "core" / "firstmate" / "shims" / "bridge-client.mjs"
#: Keys Claude Code reads in a marketplace file and in a plugin entry (it ignores others, so a
#: misspelt key would load silently).
MARKETPLACE_KEYS = {"$schema", "name", "owner", "metadata", "plugins", "description", "version"}
ENTRY_KEYS = {"name", "source", "description", "version", "author", "homepage", "repository",
              "license", "keywords", "category", "tags", "strict", "commands", "agents", "hooks",
              "mcpServers", "lspServers"}
PLUGIN_JSON_KEYS = {"name", "version", "description", "author", "homepage", "repository",
                    "license", "keywords", "commands", "agents", "hooks", "mcpServers",
                    "lspServers", "outputStyles"}
#: Names Claude Code keeps for Anthropic's own marketplaces.
RESERVED = {"claude-code-marketplace", "claude-code-plugins", "claude-plugins-official",
            "anthropic-marketplace", "anthropic-plugins", "agent-skills"}
#: Per shim harness: the keyword its package manager or gallery looks for, and how the package
#: names its entry (a manifest key, or OpenCode's main/exports).
SHIMS = {"pi": "pi-package", "omp": "omp-plugin", "opencode": "opencode-plugin"}


def load(path: Path) -> Any:
    return json.loads(path.read_text())


def test_every_plugin_folder_carries_the_same_license() -> None:
    assert LICENSE.startswith("MIT License\n") and "Firstmate contributors" in LICENSE
    for folder in PLUGIN_DIRS:
        assert (folder / "LICENSE").read_text() == LICENSE, folder
        project = pyproject(folder)
        assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"], folder
        assert project["readme"] == "README.md" and (folder / "README.md").is_file(), folder


# --- Claude Code -------------------------------------------------------------------------------


def test_the_marketplace_lists_the_claude_plugin_directory() -> None:
    market = load(REPO / ".claude-plugin" / "marketplace.json")
    assert set(market) <= MARKETPLACE_KEYS, set(market) - MARKETPLACE_KEYS
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", market["name"]), market["name"]
    assert market["name"] not in RESERVED and "claude" not in market["name"]
    assert isinstance(market["owner"], dict) and market["owner"].get("name")
    [entry] = market["plugins"]
    assert set(entry) <= ENTRY_KEYS, set(entry) - ENTRY_KEYS
    # A relative source starts with ./ and resolves from the marketplace root, never above it.
    source = entry["source"]
    assert isinstance(source, str) and source.startswith("./") and ".." not in source.split("/")
    root = REPO / source
    assert root.resolve().is_relative_to(REPO.resolve())
    assert root == REPO / "plugins" / "claude" / "src" / "firstmate_plugin_claude" / "claude_plugin"
    manifest = load(root / ".claude-plugin" / "plugin.json")
    assert set(manifest) <= PLUGIN_JSON_KEYS, set(manifest) - PLUGIN_JSON_KEYS
    assert entry["name"] == manifest["name"] == "firstmate"
    assert entry["version"] == manifest["version"] == market["metadata"]["version"] == VERSION
    assert entry["version"] == pyproject(REPO / "plugins" / "claude")["version"]
    assert entry.get("license") == manifest.get("license") == "MIT"


def test_the_plugin_hooks_run_its_launcher() -> None:
    root = REPO / "plugins" / "claude" / "src" / "firstmate_plugin_claude" / "claude_plugin"
    launcher = root / "bin" / "firstmate-hook"
    assert launcher.is_file() and os.access(launcher, os.X_OK)
    hooks = load(root / "hooks" / "hooks.json")["hooks"]
    assert set(hooks) == {"SessionStart", "Stop", "StopFailure"}
    for event, groups in hooks.items():
        [group] = groups
        [handler] = group["hooks"]
        assert re.fullmatch(r'"\$\{CLAUDE_PLUGIN_ROOT\}/bin/firstmate-hook" claude [a-z-]+',
                            handler["command"]), (event, handler["command"])


# --- npm packages of the shims -------------------------------------------------------------------


def entries(harness: str, manifest: dict[str, Any]) -> list[str]:
    """What the harness loads from the package: the files its manifest names."""
    if harness == "opencode":
        exports = manifest["exports"]
        assert exports["."] == exports["./server"] == manifest["main"]
        return [manifest["main"]]
    return list(manifest[harness]["extensions"])


@pytest.mark.parametrize("harness", sorted(SHIMS))
def test_the_shim_package_layout(harness: str) -> None:
    folder = REPO / "plugins" / harness
    manifest = load(folder / "package.json")
    assert manifest["name"] == f"firstmate-{harness}"
    assert manifest["version"] == pyproject(folder)["version"] == VERSION
    assert manifest["license"] == "MIT" and manifest["type"] == "module"
    assert SHIMS[harness] in manifest["keywords"] and harness in manifest["keywords"]
    assert f"pipx install --include-deps firstmate-plugin-{harness}" in manifest["description"]
    shim_dir = folder / "src" / f"firstmate_plugin_{harness}" / "shim"
    for entry in entries(harness, manifest):
        path = (folder / entry).resolve()
        assert path.parent == shim_dir.resolve() and path.is_file(), entry
        assert entry.removeprefix("./") in manifest["files"], entry
    # The shim lives once; its client is a link to core's, which npm pack turns into a copy.
    link = shim_dir / "bridge-client.mjs"
    assert link.is_symlink() and link.resolve() == CLIENT.resolve()
    assert str(link.relative_to(folder)) in manifest["files"]
    assert {"prepack", "postpack"} <= set(manifest["scripts"])
    assert harness_of(folder) == harness


@pytest.mark.parametrize("harness", sorted(SHIMS))
def test_the_shim_package_matches_what_fm_install_writes(harness: str) -> None:
    """``fm install <harness> --npm-package=DIR`` writes a package of its own; both name the
    same package and the keywords the harness reads."""
    sys.path.insert(0, str(REPO / "plugins" / harness / "src"))
    try:
        hooks = __import__(f"firstmate_plugin_{harness}.hooks", fromlist=["SPEC"])
    finally:
        sys.path.pop(0)
    manifest = load(REPO / "plugins" / harness / "package.json")
    assert hooks.SPEC.npm_name == manifest["name"]
    assert set(hooks.SPEC.npm_fields.get("keywords", ())) <= set(manifest["keywords"])


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
@pytest.mark.parametrize("harness", sorted(SHIMS))
def test_npm_pack_copies_the_client_in_and_puts_the_link_back(harness: str,
                                                               tmp_path: Path) -> None:
    folder = REPO / "plugins" / harness
    done = subprocess.run(["npm", "pack", "--silent", "--pack-destination", str(tmp_path)],
                          cwd=folder, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr
    link = folder / "src" / f"firstmate_plugin_{harness}" / "shim" / "bridge-client.mjs"
    assert link.is_symlink() and not (folder / ".npm-pack-links.json").exists()
    [tarball] = tmp_path.glob("*.tgz")
    with tarfile.open(tarball) as archive:
        members = {m.name.removeprefix("package/"): m for m in archive.getmembers()}
        manifest = load(folder / "package.json")
        wanted = {"package.json", "README.md", "LICENSE", *manifest["files"]}
        assert set(members) == wanted, set(members) ^ wanted
        client = members[str(link.relative_to(folder))]
        assert client.isfile()
        data = archive.extractfile(client)
        assert data is not None and data.read() == CLIENT.read_bytes()
        data = archive.extractfile(members["LICENSE"])
        assert data is not None and data.read().decode() == LICENSE
