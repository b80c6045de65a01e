"""``fm top`` on a terminal: a real tmux pane (a private server) drives it with keys and reads it
back with capture-pane; a pseudo-terminal checks the exception path restores the terminal."""

from __future__ import annotations

import os
import pty
import select
import shlex
import shutil
import signal
import subprocess
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.app.top import Frame, Gatherer
from firstmate.app.top_screen import ENTER, LEAVE, run_screen
from firstmate.store import crew
from firstmate.store.home import Home
from firstmate.testing.procs import DEADLINE, fm_command
from term_support import PROMPT, Pane, terminal


@pytest.fixture
def pane(fm_home: Home, tmp_path: Path) -> Iterator[Pane]:
    if shutil.which("tmux") is None:
        pytest.skip("the tmux binary is not installed; fm top's screen tests need a real tmux")
    env = {"FM_HOME": str(fm_home.root), "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
           "FIRSTMATE_KEYS_DIR": os.environ.get("FIRSTMATE_KEYS_DIR", ""),
           "FM_TMUX_SOCKET": os.environ["FM_TMUX_SOCKET"],  # (the test's own: none runs)
           "HOME": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    yield from terminal(env, prefix="fmtop")


def start_top(pane: Pane, tmp_path: Path) -> Path:
    """Run fm top in the pane's shell, which afterwards prints the exit status and whether the
    terminal's modes are the ones it had before; the pid file names the fm top process."""
    pidfile = tmp_path / "top.pid"
    top = shlex.join(fm_command("top"))
    pane.type(f"S=$(stty -g); sh -c 'echo $$ > {pidfile}; exec {top}'; echo \"EXITED $?\"; "
              f"[ \"$(stty -g)\" = \"$S\" ] && echo MODES-RESTORED")
    pane.wait_for(lambda s: s.startswith("fm top ") and "last wakes" in s, "the first frame")
    assert pane.flag("alternate_on") == "1"  # drawn on the alternate screen
    assert pane.flag("cursor_flag") == "0"  # with the cursor hidden
    return pidfile


def assert_restored(pane: Pane, status: int) -> None:
    def back(shown: str) -> bool:
        lines = [line.rstrip() for line in shown.splitlines() if line.strip()]
        return "MODES-RESTORED" in lines and lines[-1] == PROMPT.rstrip()

    shown = pane.wait_for(back, "the shell's prompt after the terminal's modes were compared")
    assert f"EXITED {status}" in [line.rstrip() for line in shown.splitlines()]
    assert "last wakes" not in shown  # the panel went with the alternate screen
    assert pane.flag("alternate_on") == "0" and pane.flag("cursor_flag") == "1"


@pytest.mark.tmux
def test_the_panel_follows_a_report_and_q_quits(fm_home: Home, pane: Pane,
                                                  tmp_path: Path) -> None:
    crew.add(fm_home, "alpha", "fleet:0.1")
    start_top(pane, tmp_path)
    shown = pane.screen()
    assert "crews (1)" in shown
    assert "> alpha  -        fleet:0.1  gone" in shown  # (selected; no tmux server runs)
    assert "watcher  none" in shown and "q quits" in shown
    reported = subprocess.run(fm_command("crew", "status", "alpha", "done: seen in tmux"),
                              capture_output=True, text=True, timeout=DEADLINE, check=False)
    assert reported.returncode == 0, reported.stderr
    pane.wait_for(lambda s: "done: seen in tmux" in s, "the crew's report")
    pane.tmux("send-keys", "-t", pane.target, "z")  # other keys neither quit nor echo
    pane.tmux("send-keys", "-t", pane.target, "q")
    assert_restored(pane, 0)


@pytest.mark.tmux
def test_ctrl_c_quits_quietly(fm_home: Home, pane: Pane, tmp_path: Path) -> None:
    start_top(pane, tmp_path)
    pane.tmux("send-keys", "-t", pane.target, "C-c")
    assert_restored(pane, 130)
    assert "Traceback" not in pane.screen() and "fm:" not in pane.screen()


@pytest.mark.tmux
def test_sigterm_restores_the_terminal(fm_home: Home, pane: Pane, tmp_path: Path) -> None:
    pidfile = start_top(pane, tmp_path)
    os.kill(int(pidfile.read_text()), signal.SIGTERM)
    assert_restored(pane, 143)


@pytest.mark.tmux
def test_ctrl_z_gives_the_terminal_back_until_fg(fm_home: Home, pane: Pane) -> None:
    pane.type(f"S=$(stty -g); {shlex.join(fm_command('top'))}")
    pane.wait_for(lambda s: s.startswith("fm top "), "the first frame")
    pane.tmux("send-keys", "-t", pane.target, "C-z")
    pane.wait_for(lambda s: "Stopped" in s, "the job stopped")
    assert pane.flag("alternate_on") == "0" and pane.flag("cursor_flag") == "1"
    pane.type('[ "$(stty -g)" = "$S" ] && echo SAME""-MODES')
    pane.wait_for(lambda s: "SAME-MODES" in s, "the shell's own modes while it is stopped")
    pane.type("fg")
    pane.wait_for(lambda s: s.startswith("fm top "), "the panel back after fg")
    assert pane.flag("alternate_on") == "1" and pane.flag("cursor_flag") == "0"
    pane.tmux("send-keys", "-t", pane.target, "q")
    pane.wait_for(lambda s: "SAME-MODES" in s and s.rstrip().endswith(PROMPT.rstrip()),
                  "the shell after q")
    assert pane.flag("alternate_on") == "0"


@pytest.mark.tmux
def test_a_resize_redraws_to_the_new_width(fm_home: Home, pane: Pane, tmp_path: Path) -> None:
    crew.add(fm_home, "alpha", "fleet:0.1")
    crew.append_status(fm_home, "alpha", "working: " + "w" * 200)
    start_top(pane, tmp_path)
    pane.wait_for(lambda s: any(len(line) > 100 for line in s.splitlines()), "a wide frame")
    assert pane.tmux("resize-window", "-t", pane.target, "-x", "60", "-y", "20").returncode == 0
    shown = pane.wait_for(lambda s: "working: w" in s and all(
        len(line) <= 59 for line in s.splitlines()), "the frame cut to 60 columns")
    assert "…" in shown
    pane.tmux("send-keys", "-t", pane.target, "q")
    assert_restored(pane, 0)


class Failing(Gatherer):
    def frame(self, now: float | None = None) -> Frame:
        raise RuntimeError("a bug while gathering")


def test_an_exception_restores_the_terminal(fm_home: Home) -> None:
    stops = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGTSTP)
    handlers = {sig: signal.getsignal(sig) for sig in stops}
    master, slave = pty.openpty()
    try:
        before = termios.tcgetattr(slave)
        with pytest.raises(RuntimeError, match="a bug while gathering"):
            run_screen(Failing(fm_home.root, {}), slave, slave, interval=1.0)
        assert termios.tcgetattr(slave) == before  # echo and line mode are back
        written = b""
        while True:
            ready, _, _ = select.select([master], [], [], 0)
            if not ready:
                break
            written += os.read(master, 65536)
        assert written.startswith(ENTER.encode()) and written.endswith(LEAVE.encode())
    finally:
        os.close(master)
        os.close(slave)
    assert {sig: signal.getsignal(sig) for sig in stops} == handlers  # the handlers are back
    assert not set(stops) & signal.pthread_sigmask(signal.SIG_BLOCK, [])  # and nothing is held
