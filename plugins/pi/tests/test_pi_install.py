"""pi: the shim install is not there yet, and says so without writing anything."""

from __future__ import annotations

from pathlib import Path

from firstmate.harness import InstallOptions
from firstmate_plugin_pi import plugin


def test_install_writes_nothing_and_says_why(tmp_path: Path) -> None:
    for hook in (plugin.firstmate_install, plugin.firstmate_uninstall):
        result = hook(options=InstallOptions("pi", tmp_path))
        assert result is not None and not result.changes
        assert any("arrives with the bridge" in note for note in result.notes)
        assert hook(options=InstallOptions("claude", tmp_path)) is None
    assert list(tmp_path.iterdir()) == []
