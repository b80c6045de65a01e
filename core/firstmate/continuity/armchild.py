"""One ``fm arm`` child of a re-arm owner, tracked by two threads.

A reader thread collects the child's stdout lines; a waiter thread reaps it (``waitpid``) and
*settles* it on process exit, giving its pipe a short bounded drain. The exit, not the end of
the pipe, is what counts: a child that dies while a descendant still holds its stdout settles
all the same. A reason line that arrives through that pipe after the child settled is reported
as a late line (the engine then handles the close as actionable after all).

Signals go through a pidfd opened at launch, so they can only ever reach this child, never a
process that later reuses its pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import attrs

from firstmate.base.pidfd import open_pidfd
from firstmate.plugin.handoff import ArmRef, Close, Readiness

#: How long a settled child's pipe may still deliver lines before the close is classified.
DRAIN = 0.5
#: What :meth:`ArmChild.next_line` found.
LINE = "line"
TIMEOUT = "timeout"
EXITED = "exited"


def _reason(line: str) -> bool:
    from firstmate.continuity.watchchild import REASON_RE

    return REASON_RE.match(line) is not None


@attrs.define(eq=False)
class ArmChild:
    """A launched arm. Thread-safe reads; the engine's own flags are touched by one thread."""

    proc: subprocess.Popen[bytes]
    ref: ArmRef
    launched_at: float
    detached: bool = False
    on_settle: Callable[[ArmChild], None] | None = None
    on_late_reason: Callable[[ArmChild, str], None] | None = None
    _pidfd: int | None = None
    _cond: threading.Condition = attrs.Factory(threading.Condition)
    _lines: list[tuple[str, float]] = attrs.Factory(list)
    _eof: bool = False
    _returncode: int | None = None
    _settled: bool = False
    # --- the engine's bookkeeping (one thread) ---
    #: The first ready or failed status line, once seen.
    readiness: Readiness | None = None
    #: The identity token of the watcher the status line named, read while it was alive.
    watcher_identity: str | None = None
    #: TERMed by the engine and gone within the bound: its close is the engine's own doing.
    retired: bool = False
    #: TERMed but still running: it stays in the slot and its close is a new supervised event.
    retained: bool = False
    #: ``actionable`` or ``failed`` once the engine classified its close.
    outcome: str | None = None
    #: When it was found ready (monotonic), for the failure streak.
    ready_at: float | None = None

    @classmethod
    def launch(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str],
        ref_of: Callable[[int], ArmRef],
        *,
        detached: bool = False,
        on_settle: Callable[[ArmChild], None] | None = None,
        on_late_reason: Callable[[ArmChild, str], None] | None = None,
    ) -> ArmChild:
        """Start *argv* with stdout piped to us; *detached* puts it in its own session."""
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=dict(env), close_fds=True,
            start_new_session=detached,
        )
        child = cls(proc, ref_of(proc.pid), time.monotonic(), detached=detached,
                    on_settle=on_settle, on_late_reason=on_late_reason,
                    pidfd=open_pidfd(proc.pid, for_signals=True))
        threading.Thread(target=child._read, name=f"fm-arm-{proc.pid}-out", daemon=True).start()
        threading.Thread(target=child._wait, name=f"fm-arm-{proc.pid}-wait", daemon=True).start()
        return child

    # --- facts ---------------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        with self._cond:
            return self._returncode

    @property
    def alive(self) -> bool:
        """Not yet exited (a dead child is an empty slot even before its close is handled)."""
        return self.returncode is None

    @property
    def settled(self) -> bool:
        with self._cond:
            return self._settled

    def lines(self) -> list[str]:
        with self._cond:
            return [line for line, _ in self._lines]

    def reasons(self) -> list[tuple[str, float]]:
        """The reason lines printed so far, with the time each was read."""
        with self._cond:
            return [(line, at) for line, at in self._lines if _reason(line)]

    def close_value(self) -> Close:
        found = self.reasons()
        ready = self.readiness
        return Close(
            reasons=tuple(line for line, _ in found),
            arm_pid=self.pid,
            watcher_pid=ready.watcher_pid if ready is not None else None,
            watcher_identity=self.watcher_identity,
            at=found[0][1] if found else time.time(),
        )

    # --- waiting -------------------------------------------------------------------------------

    def next_line(self, index: int, deadline: float) -> tuple[str, str]:
        """``("line", text)`` for line number *index* once it exists; ``("exited", "")`` when the
        child settled without printing it; ``("timeout", "")`` at *deadline* (monotonic)."""
        with self._cond:
            while True:
                if len(self._lines) > index:
                    return LINE, self._lines[index][0]
                if self._settled:
                    return EXITED, ""
                left = deadline - time.monotonic()
                if left <= 0:
                    return TIMEOUT, ""
                self._cond.wait(left)

    def wait_exit(self, timeout: float) -> bool:
        """True once the child has exited (reaped), waiting at most *timeout* seconds."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            while self._returncode is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def wait_settled(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self._cond:
            while not self._settled:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def wait_reason(self, timeout: float) -> bool:
        """True once a reason line exists, waiting at most *timeout* or until the child settles."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            while not any(_reason(line) for line, _ in self._lines):
                left = deadline - time.monotonic()
                if left <= 0 or self._settled:
                    return False
                self._cond.wait(left)
            return True

    # --- signals -------------------------------------------------------------------------------

    def signal(self, sig: int) -> bool:
        """Send *sig* to this child only; False once it has exited."""
        with self._cond:
            if self._returncode is not None:
                return False
            try:
                if self._pidfd is not None:
                    signal.pidfd_send_signal(self._pidfd, sig)
                else:
                    self.proc.send_signal(sig)
            except (ProcessLookupError, PermissionError, OSError):
                return False
            return True

    def terminate(self) -> bool:
        """TERM (and CONT, so a stopped child can act on it)."""
        sent = self.signal(signal.SIGTERM)
        self.signal(signal.SIGCONT)
        return sent

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    # --- threads -------------------------------------------------------------------------------

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        fd = out.fileno()
        buffer = b""
        try:
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                buffer += chunk
                *done, buffer = buffer.split(b"\n")
                for raw in done:
                    self._add(raw)
            if buffer:
                self._add(buffer)
        finally:
            with contextlib.suppress(OSError):
                out.close()
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def _add(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        with self._cond:
            self._lines.append((line, time.time()))
            late = self._settled
            self._cond.notify_all()
        if late and self.on_late_reason is not None and _reason(line):
            self.on_late_reason(self, line)

    def _wait(self) -> None:
        code = self.proc.wait()
        with self._cond:
            self._returncode = code
            if self._pidfd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._pidfd)
                self._pidfd = None
            self._cond.notify_all()
            deadline = time.monotonic() + DRAIN
            while not self._eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            self._settled = True
            self._cond.notify_all()
        if self.on_settle is not None:
            self.on_settle(self)


__all__ = ["DRAIN", "EXITED", "LINE", "TIMEOUT", "ArmChild"]
