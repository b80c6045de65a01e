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
from firstmate.plugin.harness import InstallOptions
from firstmate.plugin.manager import load_harness
from firstmate.store.home import Home
from firstmate.testing import HarnessContract, fm_command
from firstmate.testing.sites import declare

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
    declare(path, "acme", MODULE, dist="firstmate-plugin-acme", version="0.1.0")
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


def test_the_example_stands_aside_with_nothing_to_watch(site: Path, tmp_path: Path) -> None:
    env = _env(site, tmp_path / "home")
    payload = json.dumps({"acme_session": "a-1"}).encode()
    quiet = subprocess.run(fm_command("hook", "acme", "stop"), input=payload, capture_output=True,
                           timeout=60, check=False, env=env)
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, b"", b"")
    garbage = subprocess.run(fm_command("hook", "acme", "stop"), input=b"\xff{", capture_output=True,
                             timeout=60, check=False, env=env)
    assert garbage.returncode == 0 and b"Traceback" not in garbage.stderr


# --- the whole contract, continuity included ---------------------------------------------------


@pytest.fixture
def contract_site(site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example importable by the contract's own ``fm`` children too."""
    from firstmate.plugin import harnessprocs

    # The installed harnesses' process table is read once per process: read it anew with acme.
    monkeypatch.setattr(harnessprocs, "_TABLES", {})
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(site), SOURCE, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))
    return site


class TestTheExamplePassesTheContract(HarnessContract):
    @pytest.fixture
    def harness(self, contract_site: Path) -> str:
        return "acme"


#: Two broken variants of the example, with no strategy and a stop hook of their own: one never
#: parks (it never arms a watcher), one parks and then drops the wake.
BROKEN = {
    "it never armed a watcher": """
        return HookOutcome.silent()
""",
    "must reach the model exactly once": """
        from firstmate.api import park

        park(home, NAME, env, seconds=PARK_SECONDS, display_name="Acme")
        return HookOutcome.silent()
""",
}
HOOK_HEAD = """
    REARM = None

    def on_hook(self, event, payload, home, env):
        from firstmate.api import HookOutcome

"""


@pytest.mark.parametrize("failure", sorted(BROKEN))
def test_the_contract_fails_a_plugin_that_does_not_keep_watch(contract_site: Path, tmp_path: Path,
                                                               failure: str) -> None:
    code = example_code()
    head = code[:code.index("\n\nplugin = AcmePlugin()")]
    (contract_site / f"{MODULE}.py").write_text(
        head + "\n" + HOOK_HEAD + BROKEN[failure] + "\n\nplugin = AcmePlugin()\n")
    sys.modules.pop(MODULE, None)
    from firstmate.testing import rearm

    info = load_harness("acme", env={}, fresh=True).harness("acme")
    with rearm.continuity_rig("acme", tmp_path, {}) as rig, \
            pytest.raises((AssertionError, pytest.fail.Exception), match=failure):
        rearm.drive_hook(rig, info)
