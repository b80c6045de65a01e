"""Plugins are found by their entry points alone, through the cached index
(firstmate.base.pluginindex): a plugin under any module name reaches ``fm hook``'s quick gate and
full path, and the cache follows installs, uninstalls, upgrades and edits, and survives a
corrupt, planted or unwritable cache. Each case runs fm (or a fresh interpreter) in a child
process with a private site directory and cache directory."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from firstmate.testing import fm_command

PACKAGE = "acme_odd"
HARNESS = "oddity"

GATE = """
import os

def quick_gate(event, payload, env, home):
    mark = env.get("ODD_MARK")
    if mark:
        with open(mark, "a") as fh:
            fh.write(event + "\\n")
    return not env.get("ODD_IDLE")
"""

PLUGIN = """
from firstmate import hookimpl
from firstmate.plugin.harness import HarnessInfo, HookOutcome


class Odd:
    @hookimpl
    def firstmate_harness_info(self):
        return HarnessInfo(name="{harness}", display_name="Odd", family="hook",
                           rearm_owner="hook", wake_channel="test")

    @hookimpl
    def firstmate_hook(self, harness, event, payload, home, env):
        return HookOutcome(stdout="{word} " + event + "\\n")


plugin = Odd()
"""

#: Prints the index's entries and whether the metadata scan ran, from a fresh interpreter.
PROBE = """
import json, sys
from firstmate.base import pluginindex
found = pluginindex.entries()
print(json.dumps({"entries": [[e.name, e.value, e.dist, e.version] for e in found],
                  "scanned": "importlib.metadata" in sys.modules}))
"""

PAST = 1_000_000_000_000_000_000  # (2001: any directory this old keys a cache)
TICKS = itertools.count(1_000_000, 1_000_000)


class Site:
    """A private site directory on the children's path, a cache directory and a home."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "site"
        self.cache = tmp_path / "cache"
        self.cwd = tmp_path / "work"
        self.path.mkdir()
        self.cwd.mkdir()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("FM_", "FIRSTMATE_"))}
        self.env.update(
            PYTHONPATH=os.pathsep.join([str(self.path), *filter(None, os.environ.get(
                "PYTHONPATH", "").split(os.pathsep))]),
            XDG_CACHE_HOME=str(self.cache), FM_HOME=str(tmp_path / "home"),
            FIRSTMATE_KEYS_DIR=str(tmp_path / "keys"), FIRSTMATE_PLUGINS="")
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.settle()

    def install(self, version: str = "1.0", word: str = "odd", module: str = "impl") -> None:
        """Install the odd plugin (package acme_odd, entry point acme_odd.<module>:plugin)."""
        self.uninstall()
        pkg = self.path / PACKAGE
        pkg.mkdir()
        (pkg / "__init__.py").write_text(textwrap.dedent(GATE))
        (pkg / f"{module}.py").write_text(textwrap.dedent(PLUGIN.format(harness=HARNESS,
                                                                        word=word)))
        info = self.path / f"acme_odd-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: acme-odd\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(
            f"[firstmate.plugins]\n{HARNESS} = {PACKAGE}.{module}:plugin\n")
        self.settle()

    def uninstall(self) -> None:
        shutil.rmtree(self.path / PACKAGE, ignore_errors=True)
        for info in self.path.glob("acme_odd-*.dist-info"):
            shutil.rmtree(info)
        self.settle()

    def settle(self) -> None:
        """Date the site and working directories back, as an install long done leaves them
        (a directory changed a moment ago keys no cache)."""
        os.utime(self.cwd, ns=(PAST, PAST))
        when = PAST + next(TICKS)  # (each settle a time of its own, as each change has)
        os.utime(self.path, ns=(when, when))

    def probe(self) -> dict[str, object]:
        done = subprocess.run([sys.executable, "-P", "-c", PROBE], capture_output=True,
                              text=True, env=self.env, cwd=self.cwd, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        data: dict[str, object] = json.loads(done.stdout)
        return data

    def odd(self) -> list[object]:
        return [e for e in self.probe()["entries"] if e[0] == HARNESS]  # type: ignore[attr-defined]

    def hook(self, event: str = "stop", **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*fm_command("hook", HARNESS, event)], input="{}",
                              capture_output=True, text=True, env={**self.env, **env},
                              cwd=self.cwd, timeout=60, check=False)

    def index_files(self) -> list[Path]:
        return sorted((self.cache / "firstmate").glob("plugins-*.idx"))


@pytest.fixture
def site(tmp_path: Path) -> Site:
    return Site(tmp_path)


def test_hook_runs_the_gate_and_plugin_of_a_module_named_anything(site: Site,
                                                                  tmp_path: Path) -> None:
    site.install()
    mark = tmp_path / "gate-ran"
    idle = site.hook(ODD_MARK=str(mark), ODD_IDLE="1")
    assert idle.returncode == 0 and idle.stdout == "", idle.stderr
    assert mark.read_text() == "stop\n"  # the quick gate of package acme_odd answered
    busy = site.hook("session-start", ODD_MARK=str(mark))
    assert busy.returncode == 0, busy.stderr
    assert busy.stdout == "odd session-start\n"  # the plugin acme_odd.impl answered
    assert mark.read_text() == "stop\nsession-start\n"


def test_a_scan_writes_the_index_and_the_next_start_reads_it(site: Site) -> None:
    site.install()
    first = site.probe()
    assert first["scanned"] is True
    assert [HARNESS, f"{PACKAGE}.impl:plugin", "acme-odd", "1.0"] in first["entries"]
    [index] = site.index_files()
    assert index.stat().st_mode & 0o077 == 0
    second = site.probe()
    assert second["scanned"] is False  # importlib.metadata never loaded
    assert second["entries"] == first["entries"]


def test_install_upgrade_edit_and_uninstall_each_show_at_once(site: Site) -> None:
    assert site.odd() == []
    assert site.probe()["scanned"] is False  # (cached: nothing installed)
    site.install()
    assert site.odd() == [[HARNESS, f"{PACKAGE}.impl:plugin", "acme-odd", "1.0"]]
    site.install(version="2.0", module="hooks2", word="upgraded")
    assert site.odd() == [[HARNESS, f"{PACKAGE}.hooks2:plugin", "acme-odd", "2.0"]]
    assert site.hook("session-start").stdout == "upgraded session-start\n"
    # An entry_points.txt edited in place (its directory's time unchanged).
    points = site.path / "acme_odd-2.0.dist-info" / "entry_points.txt"
    assert site.probe()["scanned"] is False
    (site.path / PACKAGE / "impl.py").write_text(textwrap.dedent(
        PLUGIN.format(harness=HARNESS, word="edited")))
    points.write_text(f"[firstmate.plugins]\n{HARNESS} = {PACKAGE}.impl:plugin\n")
    os.utime(points, ns=(PAST + 7, PAST + 7))
    assert site.odd() == [[HARNESS, f"{PACKAGE}.impl:plugin", "acme-odd", "2.0"]]
    site.uninstall()
    assert site.odd() == []
    gone = site.hook()
    assert gone.returncode == 5 and "no Firstmate plugin for harness 'oddity'" in gone.stderr
    assert "Traceback" not in gone.stderr


@pytest.mark.parametrize("text", [
    "garbage\n",
    "",
    "firstmate plugin index 1\nkey 00\n",
    "\udcff\udcfe not utf-8",
    None,  # a right key with a line that is not an entry
])
def test_a_corrupt_index_is_rescanned_and_rewritten(site: Site, text: str | None) -> None:
    site.install()
    site.probe()
    [index] = site.index_files()
    good = index.read_text()
    if text is None:
        head = good.split("\n")[:2]
        text = "\n".join([*head, "oddity\tnot a module!\tplugin\tx\t1\t/x\t1", ""])
    index.write_bytes(text.encode("utf-8", "surrogateescape"))
    again = site.probe()
    assert again["scanned"] is True
    assert [HARNESS, f"{PACKAGE}.impl:plugin", "acme-odd", "1.0"] in again["entries"]
    assert index.read_text() == good
    assert site.hook("session-start").stdout == "odd session-start\n"


def test_a_planted_or_shared_index_is_never_trusted(site: Site, tmp_path: Path) -> None:
    site.install()
    site.probe()
    [index] = site.index_files()
    # A right-keyed index that points the harness at another module, writable by others.
    (site.path / "evil_mod.py").write_text("raise SystemExit('planted module imported')\n")
    site.settle()
    site.probe()
    good = index.read_text()
    planted = good.replace(f"{PACKAGE}.impl\tplugin", "evil_mod\tplugin")
    assert planted != good
    index.write_text(planted)
    index.chmod(0o666)
    done = site.hook("session-start")
    assert done.stdout == "odd session-start\n", done.stderr
    # A symlink to a right-looking file elsewhere is not followed either.
    elsewhere = tmp_path / "elsewhere.idx"
    elsewhere.write_text(planted)
    elsewhere.chmod(0o600)
    index.unlink()
    index.symlink_to(elsewhere)
    assert site.hook("session-start").stdout == "odd session-start\n"


def test_an_unwritable_cache_directory_costs_only_the_scan(site: Site, tmp_path: Path) -> None:
    site.install()
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    site.env["XDG_CACHE_HOME"] = str(blocker / "cache")  # (ENOTDIR, even for root)
    for _ in range(2):
        found = site.probe()
        assert found["scanned"] is True
        assert [HARNESS, f"{PACKAGE}.impl:plugin", "acme-odd", "1.0"] in found["entries"]
    done = site.hook("session-start")
    assert done.stdout == "odd session-start\n" and "Traceback" not in done.stderr


def test_a_directory_changed_a_moment_ago_keys_no_index(site: Site) -> None:
    site.install()
    os.utime(site.path)  # now: a second change within this clock tick could hide
    assert site.probe()["scanned"] is True
    assert site.index_files() == []
    site.settle()
    site.probe()
    assert len(site.index_files()) == 1


def test_a_plugin_that_fails_to_import_is_named_not_called_missing(site: Site) -> None:
    site.install()
    (site.path / PACKAGE / "impl.py").write_text("raise RuntimeError('boom at import')\n")
    site.settle()
    done = site.hook("session-start")
    assert done.returncode == 5
    assert "the oddity plugin (acme-odd) failed to import: RuntimeError: boom at import" in done.stderr
    assert "Traceback" not in done.stderr
