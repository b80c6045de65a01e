"""A tmux call under way: the watcher answers its doorbell while tmux works.

A pane listing (:class:`~firstmate.watch.backends.tmux.Listing`) and a batch of pane reads
(:class:`~firstmate.watch.backends.panebatch.CaptureBatch`) take tens of milliseconds at 500
panes. Started as a process whose stdout is not waited on, such a call is stepped instead: the
caller waits on its stdout *and* the doorbell, and a ring is answered while tmux goes on.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

import attrs


@attrs.define(eq=False)
class TmuxCall:
    """A tmux call under way: :meth:`step` reads what tmux wrote so far without blocking; wait
    on :meth:`fileno` between steps. A call past its deadline is killed, as :meth:`TmuxBackend.run`
    would kill it. Once over, :attr:`code` is its exit status (None: killed) and :attr:`said`
    the start of what it wrote on stderr when it failed."""

    proc: subprocess.Popen[bytes]
    deadline: float
    code: int | None = attrs.field(default=None, init=False)
    said: str = attrs.field(default="", init=False)
    _out: bytearray = attrs.field(factory=bytearray, init=False)
    _over: bool = attrs.field(default=False, init=False)

    @property
    def over(self) -> bool:
        return self._over

    @property
    def output(self) -> bytes:
        return bytes(self._out)

    def fileno(self) -> int:
        """Readable when tmux wrote more or finished (-1 once the call is over)."""
        stdout = self.proc.stdout
        return -1 if self._over or stdout is None else stdout.fileno()

    def step(self) -> bool:
        """Read what is there; True once the call is over (done, failed or killed)."""
        if self._over:
            return True
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                if time.monotonic() >= self.deadline:
                    self.kill()
                    return True
                return False
            if not chunk:
                break
            self._out += chunk
        try:  # stdout closed: tmux is exiting
            self.code = self.proc.wait(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            return True
        if self.code != 0 and self.proc.stderr is not None:
            with contextlib.suppress(OSError):  # (tmux has exited: its stderr is at its end)
                self.said = self.proc.stderr.read(4096).decode("utf-8", "replace").strip()
        self._end()
        return True

    def kill(self) -> None:
        """End the call now (the watcher stopping, or closing with the call under way)."""
        if self._over:
            return
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.proc.wait(timeout=5)
        self._end()

    def _end(self) -> None:
        self._over = True
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


__all__ = ["TmuxCall"]
