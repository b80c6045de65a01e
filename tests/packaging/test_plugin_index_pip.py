"""A plugin whose package is not called ``firstmate_plugin_<name>``, installed, upgraded and
removed by the real pip in a venv of its own, is seen by ``fm hook`` on the next run each time,
while the cached plugin index (firstmate.base.pluginindex) answers the runs in between."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import itertools
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)

HARNESS = "oddity"
PLUGIN = """
from firstmate import hookimpl
from firstmate.plugin.harness import HarnessInfo, HookOutcome


class Odd:
    @hookimpl
    def firstmate_harness_info(self):
        return HarnessInfo(name="oddity", display_name="Odd", family="hook",
                           rearm_owner="hook", wake_channel="test")

    @hookimpl
    def firstmate_hook(self, harness, event, payload, home, env):
        return HookOutcome(stdout="{word} " + event + "\\n")


plugin = Odd()
"""
PROBE = ("import json, sys\nfrom firstmate.base import pluginindex\n"
         "found = [[e.name, e.value, e.version] for e in pluginindex.entries()]\n"
         "print(json.dumps([found, 'importlib.metadata' in sys.modules]))\n")
TICKS = itertools.count(1_000_000_000_000_000_000, 1_000_000)


def wheel(folder: Path, version: str, module: str, word: str) -> Path:
    """A wheel of distribution acme-odd: package acme_odd, entry point acme_odd.<module>:plugin."""
    tag = f"acme_odd-{version}"
    files = {
        "acme_odd/__init__.py": '"""An odd plugin."""\n',
        f"acme_odd/{module}.py": textwrap.dedent(PLUGIN.format(word=word)),
        f"{tag}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: acme-odd\nVersion: {version}\n",
        f"{tag}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                  "Tag: py3-none-any\n",
        f"{tag}.dist-info/entry_points.txt":
            f"[firstmate.plugins]\n{HARNESS} = acme_odd.{module}:plugin\n",
    }
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        writer.writerow([name, f"sha256={digest.decode()}", len(text.encode())])
    writer.writerow([f"{tag}.dist-info/RECORD", "", ""])
    path = folder / f"{tag}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr(f"{tag}.dist-info/RECORD", record.getvalue())
    return path


class Venv:
    """A venv with pip that sees this environment's firstmate (a .pth file), and nothing else of
    this environment's plugins' own."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(self.root)], check=True, timeout=300)
        self.python = str(self.root / "bin" / "python")
        self.site = Path(subprocess.run(
            [self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True, timeout=60).stdout.strip())
        ours = [sysconfig.get_paths()["purelib"], *(p for p in sys.path if p.endswith("core"))]
        (self.site / "zz_firstmate.pth").write_text("\n".join(ours) + "\n")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("FM_", "FIRSTMATE_", "PYTHON"))}
        self.env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), FM_HOME=str(tmp_path / "home"),
                        FIRSTMATE_KEYS_DIR=str(tmp_path / "keys"), PIP_NO_INDEX="1",
                        PIP_DISABLE_PIP_VERSION_CHECK="1")
        self.cwd = tmp_path

    def pip(self, *args: str) -> None:
        done = subprocess.run([self.python, "-m", "pip", "-q", *args], capture_output=True,
                              text=True, env=self.env, timeout=300, check=False)
        assert done.returncode == 0, done.stdout + done.stderr

    def probe(self) -> tuple[list[list[str]], bool]:
        done = subprocess.run([self.python, "-P", "-c", PROBE], capture_output=True, text=True,
                              env=self.env, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        found, scanned = json.loads(done.stdout)
        return [entry for entry in found if entry[0] == HARNESS], scanned

    def settle(self) -> None:
        """Date the site directory back (a directory changed a moment ago keys no index)."""
        when = next(TICKS)
        os.utime(self.site, ns=(when, when))

    def indexed(self) -> list[list[str]]:
        """The odd plugin's entries once the index holds them, proven read without a scan."""
        self.settle()
        first, _ = self.probe()
        again, scanned = self.probe()
        assert not scanned and again == first
        return again

    def hook(self, event: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.python, "-P", "-m", "firstmate", "hook", HARNESS, event],
                              input="{}", capture_output=True, text=True, env=self.env,
                              cwd=self.cwd, timeout=60, check=False)


def test_pip_install_upgrade_and_uninstall_are_each_seen_at_once(tmp_path: Path) -> None:
    venv = Venv(tmp_path)
    assert venv.indexed() == []
    venv.pip("install", str(wheel(tmp_path, "1.0", "impl", "one")))
    assert venv.indexed() == [[HARNESS, "acme_odd.impl:plugin", "1.0"]]
    assert venv.hook("session-start").stdout == "one session-start\n"
    venv.pip("install", "--upgrade", str(wheel(tmp_path, "2.0", "renamed", "two")))
    # The hook right after the upgrade, before anything rescanned: it sees the new module.
    done = venv.hook("session-start")
    assert done.stdout == "two session-start\n", done.stderr
    assert venv.indexed() == [[HARNESS, "acme_odd.renamed:plugin", "2.0"]]
    venv.pip("uninstall", "-y", "acme-odd")
    gone = venv.hook("session-start")
    assert gone.returncode == 5 and "no Firstmate plugin for harness 'oddity'" in gone.stderr
    assert "Traceback" not in gone.stderr
    assert venv.indexed() == []
