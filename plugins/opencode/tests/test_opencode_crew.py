"""OpenCode as a crew: ``opencode --prompt "<brief>"`` with the crew's own config directory,
whose plugin records turn ends."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from firstmate.api import CrewLaunch, CrewLaunchRequest
from firstmate.testing import eventually
from firstmate_plugin_opencode.hooks import CREW_PLACEHOLDER, plugin


def _launch(tmp_path: Path, fm: str = "/opt/fm/bin/fm") -> CrewLaunch:
    request = CrewLaunchRequest(crew="w1", cwd=tmp_path, home=tmp_path / "home", brief="B",
                                fm_argv=(fm,), launch_dir=tmp_path / "l",
                                extra_args=("--model", "m/x"))
    assert plugin.firstmate_crew_launch(harness="omp", request=request) is None
    launch = plugin.firstmate_crew_launch(harness="opencode", request=request)
    assert launch is not None
    return launch


def test_the_crew_gets_its_own_config_directory_and_the_brief(tmp_path: Path) -> None:
    launch = _launch(tmp_path)
    [crew_plugin] = launch.files
    assert launch.argv == ("opencode", "--model", "m/x", "--prompt", "B")
    assert dict(launch.env) == {"OPENCODE_CONFIG_DIR": str(tmp_path / "l" / "opencode")}
    assert crew_plugin.path == "opencode/plugins/firstmate-crew.js"
    assert CREW_PLACEHOLDER not in crew_plugin.text
    assert json.dumps(["/opt/fm/bin/fm", "crew", "turn-ended", "w1"]) in crew_plugin.text


@pytest.mark.skipif(shutil.which("node") is None, reason="node runs the crew plugin")
def test_the_crew_plugin_records_one_turn_end_per_busy_to_idle(tmp_path: Path) -> None:
    """The plugin under Node, fed OpenCode's events: each idle is announced twice (status and
    the deprecated session.idle), and a session idles at startup before any turn."""
    marker = tmp_path / "turns"
    recorder = tmp_path / "record.sh"
    recorder.write_text(f'#!/bin/sh\necho "$*" >> "{marker}"\n')
    recorder.chmod(0o755)
    [crew_plugin] = _launch(tmp_path, str(recorder)).files
    module = tmp_path / "plugin.mjs"
    module.write_text(crew_plugin.text)
    driver = tmp_path / "drive.mjs"
    driver.write_text(f"""
import plugin from {json.dumps(str(module))};
const hooks = await plugin.server({{}});
const send = (type, properties) => hooks.event({{ event: {{ type, properties }} }});
const status = (s) => send("session.status", {{ sessionID: "s1", status: {{ type: s }} }});
await status("idle");
await send("session.idle", {{ sessionID: "s1" }});
for (let turn = 0; turn < 2; turn++) {{
  await status("busy");
  await status("idle");
  await send("session.idle", {{ sessionID: "s1" }});
}}
await send("some.other.event", null);
""")
    done = subprocess.run(["node", str(driver)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    # Every recorder the plugin spawned was started before node exited; once none is still
    # running, every line they write is in the log.
    eventually("every recorder to end", lambda: not _running(recorder))
    assert marker.read_text().splitlines() == ["crew turn-ended w1", "crew turn-ended w1"]


def _running(script: Path) -> bool:
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(script).encode() in (entry / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False
