"""The plugin manager: discovery, allow/block lists, isolation of broken plugins."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from firstmate.testing import fm_command


def make_dist(site: Path, name: str, body: str) -> None:
    """A minimal installed distribution exposing one firstmate.plugins entry point."""
    pkg = f"fmtest_{name}"
    (site / f"{pkg}.py").write_text(textwrap.dedent(body))
    info = site / f"{pkg}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {pkg}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[firstmate.plugins]\n{name} = {pkg}:plugin\n")


GOOD = """
from firstmate import hookimpl
from firstmate.plugin.harness import HarnessInfo

class P:
    @hookimpl
    def firstmate_harness_info(self):
        return HarnessInfo(name="{name}", display_name="{name}", family="hook",
                           rearm_owner="hook", wake_channel="test")

plugin = P()
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    path = tmp_path / "site"
    path.mkdir()
    make_dist(path, "alpha", GOOD.format(name="alpha"))
    make_dist(path, "beta", GOOD.format(name="beta"))
    make_dist(path, "broken", "raise RuntimeError('boom at import')\n")
    make_dist(path, "typo", """
from firstmate import hookimpl
class P:
    @hookimpl
    def firstmate_harness_inf(self):
        return None
plugin = P()
""")
    return path


def plugins_json(site: Path, **env: str) -> tuple[int, dict[str, object], str]:
    import os

    full_env = {**os.environ, **env}
    full_env["PYTHONPATH"] = os.pathsep.join([str(site), full_env.get("PYTHONPATH", "")])
    out = subprocess.run(fm_command("plugins", "--json"), capture_output=True, text=True,
                         env=full_env, timeout=60, check=False)
    data = json.loads(out.stdout) if out.stdout.strip() else {}
    return out.returncode, data, out.stderr


def names(data: dict[str, object]) -> set[str]:
    return {p["name"] for p in data["plugins"]}  # type: ignore[index,union-attr]


def test_broken_and_misspelt_plugins_are_reported_and_others_load(site: Path) -> None:
    rc, data, _ = plugins_json(site, FIRSTMATE_DISABLE_PLUGINS="typo")
    assert rc == 0
    assert {"alpha", "beta"} <= names(data)
    failures = {f["name"]: f["error"] for f in data["failures"]}  # type: ignore[index,union-attr]
    assert "boom at import" in failures["broken"]


def test_misspelt_hook_fails_loudly(site: Path) -> None:
    rc, _, err = plugins_json(site, FIRSTMATE_PLUGINS="typo")
    assert rc != 0
    assert "firstmate_harness_inf" in err
    assert "Traceback" not in err


def test_allow_list_loads_only_named(site: Path) -> None:
    rc, data, _ = plugins_json(site, FIRSTMATE_PLUGINS="alpha")
    assert rc == 0
    assert names(data) == {"alpha"}


def test_block_list_skips_named(site: Path) -> None:
    rc, data, _ = plugins_json(site, FIRSTMATE_DISABLE_PLUGINS="alpha,typo,broken")
    assert rc == 0
    assert "alpha" not in names(data)
    assert "beta" in names(data)


def test_load_harness_unknown_names_the_install_command() -> None:
    from firstmate.base.errors import FirstmateError
    from firstmate.plugin.manager import load_harness

    with pytest.raises(FirstmateError) as err:
        load_harness("no-such-harness")
    assert err.value.exit_code == 5
    assert err.value.message.endswith("add it with: fm plugin add no-such-harness")


def test_core_defaults_register_through_the_same_manager() -> None:
    from firstmate.plugin.manager import load

    host = load({"FIRSTMATE_PLUGINS": "nothing-matches-this"})
    assert host.pm.get_plugin("firstmate-core") is not None
    assert host.harnesses() == []
