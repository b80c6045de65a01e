"""The README's main job: `fm demo` runs a supervised fleet end to end and keeps its invariants."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
from firstmate.app.demo import leftovers
from firstmate.app.demo_panel import (
    CLEAR_EOS,
    HOME_CURSOR,
    CrewRow,
    LivePanel,
    Snapshot,
    WakeRow,
    frame,
    render_panel,
    wants_live_view,
)
from firstmate.testing import fm_command


def survivors(home: str) -> list[str]:
    """Processes whose command line or FM_HOME names ``home``."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or ())
            named = home in cmdline or proc.environ().get("FM_HOME") == home
            if named and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{proc.pid}: {cmdline}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.mark.timeout(480)  # the scenario adapts to a slow machine (demo.SCENARIO_BOUND_S)
def test_demo_runs_the_fleet_and_every_invariant_holds() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    out = subprocess.run(fm_command("demo"), capture_output=True, text=True, env=env,
                         timeout=420, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all invariants held" in out.stdout
    assert "check: rearm-resurface" in out.stdout          # the downtime was announced
    assert "downtime announcements: 1" in out.stdout       # … exactly once
    assert "chaos: SIGKILL watcher" in out.stdout
    assert "Traceback" not in out.stderr
    # Not a terminal: plain event lines, no escape codes.
    assert "\x1b[" not in out.stdout
    assert re.search(r"^  event → reason latency .*: p50 \d+ ms, max \d+ ms over \d+ status wakes",
                     out.stdout, re.MULTILINE), out.stdout
    assert re.search(r"^  append → reason latency .*: p50 \d+ ms", out.stdout, re.MULTILINE)
    first = out.stdout.splitlines()[0]
    match = re.search(r"\] home (\S+) ", first)
    assert match, first
    home = match.group(1)
    assert not survivors(home)
    assert not os.path.exists(home)


def test_demo_rejects_unknown_arguments() -> None:
    out = subprocess.run(fm_command("demo", "--bogus"), capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 2
    assert out.stderr == "fm: demo: unrecognized arguments: --bogus; run 'fm demo --help'\n"


SNAP = Snapshot(
    elapsed=12.3,
    crews=(CrewRow("alpha", "done: parser refactor merged", "busy"),
           CrewRow("bravo", "needs-decision: key=db postgres or sqlite?", "stale"),
           CrewRow("charlie", "", "idle")),
    watcher_pid=4242, watcher_state="healthy", beacon_age=0.4, queue_depth=2,
    episode="ep-7f3a", home="/tmp/firstmate-demo-x",
    wakes=tuple(WakeRow(f"signal: crew{i}.status: working", 10.0 + i, 3.0 + i) for i in range(7)),
    events=tuple(f"[{i:6.2f}s] event {i}" for i in range(9)),
)


def test_panel_shows_every_part_of_the_snapshot() -> None:
    text = render_panel(SNAP, width=100)
    assert text.startswith("firstmate demo   12.3s  home /tmp/firstmate-demo-x")
    assert "pid 4242 (healthy)" in text and "beacon age 0.4s" in text
    assert "depth 2" in text and "episode ep-7f3a" in text
    for name, state in (("alpha", "busy"), ("bravo", "stale"), ("charlie", "idle")):
        assert re.search(rf"^  {name}\s+{state}\b", text, re.MULTILINE), text
    assert "done: parser refactor merged" in text
    shown = [line for line in text.splitlines() if "signal: crew" in line]
    assert [line.split()[-2] for line in shown] == [f"crew{i}.status:" for i in range(2, 7)]
    assert "12 ms" in shown[0] and "5 ms" in shown[0]
    assert "event 8" in text and "event 2" not in text
    assert all(len(line) <= 100 for line in text.splitlines())


def test_panel_fits_a_narrow_terminal_and_an_empty_snapshot() -> None:
    text = render_panel(Snapshot(elapsed=0.0), width=40)
    assert "pid - (none)" in text and "depth -" in text and "(none yet)" in text
    assert all(len(line) <= 40 for line in render_panel(SNAP, width=40).splitlines())


def test_a_frame_redraws_in_place() -> None:
    drawn = frame(SNAP, 80)
    assert drawn.startswith(HOME_CURSOR) and drawn.endswith(CLEAR_EOS)
    assert drawn.count("\x1b[K\n") == len(render_panel(SNAP, 80).splitlines())


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_live_view_only_on_a_capable_terminal() -> None:
    assert wants_live_view(FakeTTY(), {"TERM": "xterm-256color"})
    assert not wants_live_view(FakeTTY(), {"TERM": "dumb"})
    assert not wants_live_view(FakeTTY(), {})
    assert not wants_live_view(io.StringIO(), {"TERM": "xterm"})


def test_live_panel_draws_until_stopped_and_survives_a_failing_sample() -> None:
    out = FakeTTY()
    calls: list[int] = []
    third = threading.Event()

    def take() -> Snapshot:
        calls.append(1)
        if len(calls) == 2:
            raise OSError("home vanished")
        if len(calls) >= 3:
            third.set()
        return SNAP

    panel = LivePanel(out, take, lambda: 80, interval=0.01)
    panel.start()
    try:
        assert third.wait(timeout=30)
    finally:
        panel.stop()
    assert len(calls) >= 3
    assert panel.errors == ["OSError: home vanished"]
    written = out.getvalue()
    assert written.count(HOME_CURSOR) >= 2 and written.endswith("\x1b[?25h")


def test_leftover_scan_finds_a_process_that_names_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "FM_HOME": str(home)}
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE, env=env)
    try:
        assert child.pid in [pid for pid, _ in leftovers(home, "no-such-socket")]
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    assert child.pid not in [pid for pid, _ in leftovers(home, "no-such-socket")]
