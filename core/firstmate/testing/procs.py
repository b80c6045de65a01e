"""Real processes for tests: ``fm`` run with this interpreter, a child's stdout read with a
deadline, an identity read once the exec is done, and ``fm arm`` spawned in a home."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs
import pytest

from firstmate.store.home import Home
from firstmate.store.identity import ProcessIdentity

#: Generous "eventually" bound for a loaded two-core machine; never an upper bound on speed.
DEADLINE = 30.0

T = TypeVar("T")


def eventually(what: str, check: Callable[[], T | None], deadline: float = DEADLINE,
               *, interval: float = 0.05, gone: subprocess.Popen[Any] | None = None,
               gone_means: str = "", diag: Callable[[], str] | None = None) -> T:
    """*check*'s first truthy answer, polled every *interval* seconds until *deadline* (for
    what offers no event to wait on: the store, /proc, a pane); fails with *gone_means* as soon
    as *gone* ends. The one polling helper of the tests; *diag*, when given, adds what it
    returns (a pane's screen, a log) to a timeout's failure."""
    end = time.monotonic() + deadline
    while True:
        value = check()
        if value:
            return value
        if gone is not None and gone.poll() is not None:
            out, err = drain_output(gone)
            pytest.fail(f"{gone_means} (exit {gone.returncode}; stdout {out!r}; stderr {err!r})")
        if time.monotonic() > end:
            extra = f"\n{diag()}" if diag is not None else ""
            pytest.fail(f"timed out after {deadline:g}s waiting for {what}{extra}")
        time.sleep(interval)


def drain_output(proc: subprocess.Popen[Any]) -> tuple[str, str]:
    """What an ended (or killed) process left on its pipes, as text."""
    with contextlib.suppress(ValueError, OSError, subprocess.SubprocessError):
        out, err = proc.communicate(timeout=5)
        return _text(out), _text(err)
    return "", ""


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else ""


def fm_command(*args: str) -> list[str]:
    """The argv that runs ``fm`` with this interpreter (works installed or from a checkout)."""
    return [sys.executable, "-m", "firstmate", *args]


def exec_identity(popen: subprocess.Popen[Any], deadline: float = DEADLINE) -> ProcessIdentity:
    """The identity of a child spawned with an argv list, once its exec is done. Right after a
    spawn ``/proc`` may still show the forking interpreter's command line, and an identity read
    then never matches the process again (a window that grows on a loaded machine)."""
    from firstmate.store.identity import cmd_hash, identity_of

    assert isinstance(popen.args, list | tuple), "spawn with an argv list"
    want = cmd_hash([os.fsdecode(arg) for arg in popen.args])
    end = time.monotonic() + deadline
    while True:
        found = identity_of(popen.pid)
        if found is not None and found.cmd_hash == want:
            return found
        if popen.poll() is not None or time.monotonic() >= end:
            pytest.fail(f"pid {popen.pid} never showed its own command line (exit {popen.poll()})")
        time.sleep(0.01)  # a poll with a deadline: /proc offers no event for an exec


def read_line(popen: subprocess.Popen[bytes], deadline: float = DEADLINE, *,
              pending: bytearray | None = None,
              context: Callable[[], str] | None = None) -> str:
    """The next line of *popen*'s stdout (without its newline), waited for at most *deadline*
    seconds; fails the test when none arrives or stdout closes first.

    With *pending* (the caller's buffer, kept between calls) it reads in chunks and leaves what
    follows the line there; without, it reads a byte at a time so nothing past the line is taken
    from the pipe. *context*, called on failure, adds to the message (say, the child's stderr).
    """
    assert popen.stdout is not None
    fd = popen.stdout.fileno()
    buf = bytearray() if pending is None else pending
    size = 1 if pending is None else 65536
    end = time.monotonic() + deadline
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = end - time.monotonic()
            if left <= 0:
                pytest.fail(f"no line from pid {popen.pid} within {deadline}s; got "
                            f"{bytes(buf)!r}{context() if context else ''}")
            if sel.select(left):
                chunk = os.read(fd, size)
                if not chunk:
                    pytest.fail(f"pid {popen.pid} closed stdout (rc {popen.poll()}) after "
                                f"{bytes(buf)!r}{context() if context else ''}")
                buf += chunk
    at = buf.index(b"\n")
    line = bytes(buf[:at])
    del buf[:at + 1]
    return line.decode(errors="replace")


def _quietly() -> contextlib.suppress:
    return contextlib.suppress(OSError, subprocess.SubprocessError)


@attrs.define(eq=False)
class SpawnedArm:
    """An ``fm arm`` process: :attr:`status` is its first status line (``watcher: started …``,
    ``watcher: attached …`` or ``watcher: FAILED - …``)."""

    popen: subprocess.Popen[bytes]
    env: Mapping[str, str]
    stderr_path: Path
    status: str = ""
    _buf: bytearray = attrs.field(factory=bytearray)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def line(self, deadline: float = DEADLINE) -> str:
        """The next stdout line; fails the test when none arrives within *deadline* seconds."""
        return read_line(self.popen, deadline, pending=self._buf,
                         context=lambda: f"; fm arm stderr {self.stderr()!r}")

    def wait_reason(self, deadline: float = DEADLINE) -> str:
        """The cycle's reason line (the next stdout line), awaited for at most *deadline*."""
        return self.line(deadline)

    def wait(self, deadline: float = DEADLINE) -> int:
        return self.popen.wait(timeout=deadline)

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """``fm arm --stop`` (stops the identity-verified watcher), then kill what is left."""
        with _quietly():
            subprocess.run(fm_command("arm", "--stop"), env=dict(self.env), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=DEADLINE, check=False)
        if self.popen.poll() is None:
            with _quietly():
                self.popen.wait(timeout=5)
        # The arm runs in its own process group: anything it started and left behind goes too.
        with _quietly():
            os.killpg(self.popen.pid, signal.SIGKILL)
        with _quietly():
            self.popen.wait(timeout=DEADLINE)
        if self.popen.stdout is not None:
            self.popen.stdout.close()


def arm_env(home: Home, tmp_path: Path, **extra: str) -> dict[str, str]:
    """An environment for arms and watchers in *home*: no tmux, no plugins, no coalescing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env.update(FM_HOME=str(home.root), FM_SIGNAL_GRACE="0", FM_TMUX=str(tmp_path / "no-tmux"),
               FIRSTMATE_PLUGINS="none")
    env.update(extra)
    return env


def spawn_arm(home: Home, tmp_path: Path, *args: str, env: Mapping[str, str] | None = None,
              deadline: float = DEADLINE) -> SpawnedArm:
    """Start ``fm arm ARGS…`` and read its first status line."""
    run_env = dict(env) if env is not None else arm_env(home, tmp_path)
    err = tmp_path / f"arm-stderr-{time.monotonic_ns()}.txt"
    with open(err, "wb") as err_file:
        popen = subprocess.Popen(fm_command("arm", *args), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=err_file, env=run_env,
                                 start_new_session=True)
    arm = SpawnedArm(popen, run_env, err)
    try:
        arm.status = arm.line(deadline)
    except BaseException:
        arm.stop()
        raise
    return arm
