"""Pytest helpers for Firstmate and its plugins (an opt-in pytest plugin).

Enable with ``pytest_plugins = ["firstmate.testing"]`` in a conftest.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from firstmate.home import Home


def fm_command(*args: str) -> list[str]:
    """The argv that runs ``fm`` with this interpreter (works installed or from a checkout)."""
    return [sys.executable, "-m", "firstmate", *args]


@pytest.fixture
def fm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    """A fresh, prepared home; ``FM_HOME`` points at it for this test and its children."""
    root = tmp_path / "home"
    monkeypatch.setenv("FM_HOME", str(root))
    for name in list(os.environ):
        if name.startswith("FM_") and name != "FM_HOME":
            monkeypatch.delenv(name, raising=False)
    yield Home(root).ensure()


@pytest.fixture
def fm_env(fm_home: Home) -> Mapping[str, str]:
    """The environment a child ``fm`` process should run with."""
    return {**os.environ, "FM_HOME": str(fm_home.root)}


def contract_plugin_names(env: Mapping[str, str] | None = None) -> list[str]:
    """Plugins the contract suite runs against: ``FIRSTMATE_CONTRACT_PLUGINS`` or every one installed."""
    env = os.environ if env is None else env
    named = [n.strip() for n in env.get("FIRSTMATE_CONTRACT_PLUGINS", "").split(",") if n.strip()]
    if named:
        return named
    from importlib.metadata import entry_points

    from firstmate.plugins import ENTRY_POINT_GROUP

    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


class HarnessContract:
    """Checks every harness plugin must pass. Subclass with ``harness = "<name>"`` or parametrise
    the ``harness`` fixture; each check is a plain pytest test method."""

    @pytest.fixture
    def plugin(self, harness: str) -> object:
        from firstmate.plugins import load_harness

        host = load_harness(harness)
        registered = host.pm.get_plugin(harness)
        assert registered is not None, f"{harness} was not registered"
        return registered

    def test_declares_harness_info_under_its_entry_point_name(self, harness: str, plugin: object) -> None:
        from firstmate.harness import HarnessInfo

        info = plugin.firstmate_harness_info()  # type: ignore[attr-defined]
        assert isinstance(info, HarnessInfo)
        assert info.name == harness
        assert info.display_name

    def test_found_by_entry_point_scan(self, harness: str) -> None:
        from firstmate.plugins import load

        host = load()
        assert harness in {info.name for info in host.harnesses()}
        assert not [f for f in host.failures if f.name == harness]

    def test_hookimpls_match_known_specs(self, harness: str) -> None:
        # check_pending raises for a misspelt hook name; load_harness calls it.
        from firstmate.plugins import load_harness

        load_harness(harness).pm.check_pending()

    def test_plugin_is_not_comparable_by_value(self, plugin: object) -> None:
        # Plugins are services (attrs eq=False): two instances are never "equal" registrations.
        assert plugin != type(plugin)()
