"""A terminal for tests: a shell in a pane of a private tmux server, driven with send-keys and read
back with capture-pane, as a user at a terminal would type and see."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping

import attrs
from firstmate.testing.procs import DEADLINE, eventually

PROMPT = "fmtest$ "


@attrs.define
class Pane:
    socket: str
    target: str = "top"

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=30, check=False)

    def screen(self, *, escapes: bool = False) -> str:
        return self.tmux("capture-pane", "-p", *(["-e"] if escapes else []),
                         "-t", self.target).stdout

    def flag(self, name: str) -> str:
        return self.tmux("display-message", "-p", "-t", self.target, f"#{{{name}}}").stdout.strip()

    def wait_for(self, ok: Callable[[str], bool], what: str) -> str:
        """The pane's screen once it shows *what* (*ok* says so; capture-pane's screen is never
        empty, so the screen itself is the truthy answer)."""
        def shown() -> str:
            screen = self.screen()
            return screen if ok(screen) else ""
        return eventually(f"the pane to show {what}", shown, DEADLINE, interval=0.02,
                          diag=lambda: f"it shows:\n{self.screen()}")

    def type(self, line: str) -> None:
        self.keys(line)
        self.press("Enter")

    def keys(self, text: str) -> None:
        """Type *text* as it is."""
        assert self.tmux("send-keys", "-t", self.target, "-l", text).returncode == 0

    def press(self, *names: str) -> None:
        """Press keys by tmux's names (``Down``, ``Enter``, ``C-b``...)."""
        for name in names:
            assert self.tmux("send-keys", "-t", self.target, name).returncode == 0


def terminal(env: Mapping[str, str], *, width: int = 110, height: int = 30,
             prefix: str = "fmterm") -> Iterator[Pane]:
    """A shell (``sh``, prompt :data:`PROMPT`) in a fresh private tmux server, started with
    exactly *env* (plus ``TERM=screen``), in a window of *width* × *height*; the server is
    killed afterwards."""
    srv = Pane(f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    full = {"TERM": "screen", "PS1": PROMPT, **env}
    shell = ["env", "-i", *(f"{k}={v}" for k, v in full.items()), "sh"]
    started = srv.tmux("new-session", "-d", "-s", srv.target, "-x", str(width), "-y",
                       str(height), *shell)
    assert started.returncode == 0, started.stderr
    try:
        srv.wait_for(lambda s: PROMPT.strip() in s, "the shell prompt")
        yield srv
    finally:
        srv.tmux("kill-server")
