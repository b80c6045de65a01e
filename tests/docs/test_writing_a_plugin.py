"""docs/writing-a-plugin.md: the example plugin in the page installs, is found and works."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import firstmate
import pytest
from firstmate.harness import InstallOptions
from firstmate.home import Home
from firstmate.plugins import load_harness
from firstmate.testing import fm_command

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-a-plugin.md"
SOURCE = str(Path(firstmate.__file__).resolve().parents[1])
MODULE = "firstmate_plugin_acme"


def example_code() -> str:
    text = DOC.read_text()
    _, found, rest = text.partition("## A minimal working plugin")
    assert found, "the page has no example section"
    match = re.search(r"```python\n(.*?)```", rest, re.S)
    assert match is not None, "the example section has no python block"
    return match.group(1)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The example written as an installed distribution with a firstmate.plugins entry point."""
    path = tmp_path / "site"
    path.mkdir()
    (path / f"{MODULE}.py").write_text(example_code())
    info = path / "firstmate_plugin_acme-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: firstmate-plugin-acme\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[firstmate.plugins]\nacme = {MODULE}:plugin\n")
    monkeypatch.syspath_prepend(str(path))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    yield path
    sys.modules.pop(MODULE, None)


def _env(site: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FM_", "FIRSTMATE_"))}
    env["FM_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(site), SOURCE, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    return env


def test_fm_plugins_lists_the_example(site: Path, tmp_path: Path) -> None:
    done = subprocess.run(fm_command("plugins", "--json"), capture_output=True, text=True,
                          timeout=60, check=False, env=_env(site, tmp_path / "home"))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    found = [p for p in data["plugins"] if p["name"] == "acme"]
    assert found, data
    assert found[0]["family"] == "hook" and found[0]["hook_events"] == ["stop"]
    assert found[0]["version"] == "0.1.0"
    assert not [f for f in data["failures"] if f.get("name") == "acme"]


def test_load_harness_registers_the_example(site: Path, tmp_path: Path) -> None:
    host = load_harness("acme", env={})
    info = host.harness("acme")
    assert info is not None and info.display_name == "Acme"
    assert not host.failures


def test_the_example_installs_idempotently_and_uninstalls(site: Path, tmp_path: Path) -> None:
    host = load_harness("acme", env={})
    home = Home(tmp_path / "home")
    project = tmp_path / "project"
    project.mkdir()
    planned = host.install(home, InstallOptions(harness="acme", project=project, dry_run=True))
    assert planned is not None and [c.action for c in planned.changes] == ["created"]
    assert not (project / ".acme").exists()
    first = host.install(home, InstallOptions(harness="acme", project=project))
    assert first is not None and first.written == (project / ".acme" / "hooks.json",)
    hooks = json.loads((project / ".acme" / "hooks.json").read_text())
    assert hooks["hooks"]["stop"][0]["command"] == "fm hook acme stop"
    second = host.install(home, InstallOptions(harness="acme", project=project))
    assert second is not None and not second.changed
    gone = host.uninstall(home, InstallOptions(harness="acme", project=project))
    assert gone is not None and gone.removed
    assert not (project / ".acme").exists()


def test_the_example_hook_blocks_while_wakes_are_queued(site: Path, tmp_path: Path) -> None:
    home_root = tmp_path / "home"
    env = _env(site, home_root)
    payload = json.dumps({"acme_session": "a-1"}).encode()
    quiet = subprocess.run(fm_command("hook", "acme", "stop"), input=payload, capture_output=True,
                           timeout=60, check=False, env=env)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, b"", b"")
    appended = subprocess.run(fm_command("wake", "append", "signal", "k", "hello"),
                              capture_output=True, timeout=60, check=False, env=env)
    assert appended.returncode == 0, appended.stderr
    woken = subprocess.run(fm_command("hook", "acme", "stop"), input=payload, capture_output=True,
                           timeout=60, check=False, env=env)
    assert woken.returncode == 2, woken.stderr
    assert b"1 queued wake(s)" in woken.stderr
    garbage = subprocess.run(fm_command("hook", "acme", "stop"), input=b"\xff{", capture_output=True,
                             timeout=60, check=False, env=env)
    assert garbage.returncode == 0 and b"Traceback" not in garbage.stderr
