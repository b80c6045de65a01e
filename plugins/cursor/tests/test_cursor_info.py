from __future__ import annotations

import json
import subprocess
import sys

from firstmate_plugin_cursor import plugin
from firstmate_plugin_cursor.hooks import INFO


def test_declares_its_harness() -> None:
    assert plugin.firstmate_harness_info() is INFO
    assert INFO.name == "cursor"


def test_discovered_through_the_entry_point() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "firstmate", "plugins", "--json", "--require", "cursor"],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    names = [p["name"] for p in json.loads(out.stdout)["plugins"]]
    assert "cursor" in names
