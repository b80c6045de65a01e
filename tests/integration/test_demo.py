"""The README's main job: `fm demo` runs a supervised fleet end to end and keeps its invariants."""

from __future__ import annotations

import os
import subprocess

from firstmate.testing import fm_command


def test_demo_runs_the_fleet_and_every_invariant_holds() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    out = subprocess.run(fm_command("demo"), capture_output=True, text=True, env=env,
                         timeout=180, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all invariants held" in out.stdout
    assert "check: rearm-resurface" in out.stdout          # the downtime was announced
    assert "downtime announcements: 1" in out.stdout       # … exactly once
    assert "chaos: SIGKILL watcher" in out.stdout
    assert "Traceback" not in out.stderr


def test_demo_rejects_unknown_arguments() -> None:
    out = subprocess.run(fm_command("demo", "--bogus"), capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 2
    assert out.stderr.startswith("fm: fm demo takes only --keep")
