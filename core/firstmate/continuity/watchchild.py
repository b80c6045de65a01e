"""The watcher child as its arm sees it: the child's environment, its process (stdout lines,
readiness pipe, pidfd), and reading reason lines."""

from __future__ import annotations

import contextlib
import os
import re
import select
import subprocess
import time
from collections.abc import Mapping, Sequence

import attrs

from firstmate.base import stopsignals
from firstmate.store import cyclelog
from firstmate.store.identity import ProcessIdentity
from firstmate.watch.watcher import code_dir

#: A reason line, as every adapter recognises it.
REASON_RE = re.compile(r"(signal:|stale:|check:|heartbeat($|:))")


def reason_class(line: str) -> str:
    head = line.split(":", 1)[0].strip()
    return f"actionable-{head if head in ('signal', 'stale', 'check') else 'heartbeat'}"


def _exit_fields(returncode: int | None) -> tuple[int | None, str]:
    """(exit status as a shell shows it, signal name) for a child's return code."""
    if returncode is None:
        return None, "unknown"
    if returncode < 0:
        return 128 - returncode, cyclelog.signal_name(-returncode)
    if returncode - 128 in (int(s) for s in stopsignals.STOP_SIGNALS):
        return returncode, cyclelog.signal_name(returncode - 128)
    return returncode, "none"


def _started(ident: ProcessIdentity | None, fallback: float) -> float:
    """When a watcher started: its identity's start time, else *fallback* (an upper bound)."""
    return ident.started if ident is not None else fallback


def _readable(fds: Sequence[int | None], timeout: float) -> set[int]:
    """The descriptors of *fds* that are readable (or hung up) within *timeout* seconds."""
    live = [fd for fd in fds if fd is not None and fd >= 0]
    if not live:
        time.sleep(max(0.0, timeout))
        return set()
    poller = select.poll()
    for fd in live:
        poller.register(fd, select.POLLIN | select.POLLPRI)
    try:
        events = poller.poll(max(0.0, timeout) * 1000)
    except OSError:
        return set()
    return {fd for fd, _ in events}


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """The watcher child's environment: ours, with this code first on PYTHONPATH."""
    out = dict(env)
    parent = str(code_dir().parent)
    paths = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p]
    if parent not in paths and parent not in _site_dirs():
        out["PYTHONPATH"] = os.pathsep.join([parent, *paths])
    return out


def _site_dirs() -> set[str]:
    import site

    dirs = set(site.getsitepackages()) if hasattr(site, "getsitepackages") else set()
    with contextlib.suppress(Exception):
        dirs.add(site.getusersitepackages())
    return {os.path.abspath(d) for d in dirs}


@attrs.define(eq=False)
class Child:
    """The watcher this arm spawned."""

    proc: subprocess.Popen[bytes]
    identity: ProcessIdentity | None
    started_at: float
    pidfd: int | None = None
    ready: int | None = None
    out_fd: int | None = None
    buffer: bytes = b""
    lines: list[str] = attrs.Factory(list)
    #: Direct mode (:mod:`firstmate.watch.directline`): the pipe the arm says go on; once it
    #: did, ``direct`` is set and the reason line is the watcher's to write.
    go: int | None = None
    direct: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read(self) -> None:
        """Take what the child wrote; complete lines go to :attr:`lines`."""
        while self.out_fd is not None:
            try:
                data = os.read(self.out_fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                os.close(self.out_fd)
                self.out_fd = None
                if self.buffer:
                    self.lines.append(self.buffer.decode("utf-8", "replace"))
                    self.buffer = b""
                break
            self.buffer += data
            *done, self.buffer = self.buffer.split(b"\n")
            self.lines.extend(part.decode("utf-8", "replace") for part in done)
            if len(data) < 65536 and not self.buffer:
                # The pipe held whole lines and is empty now: a reason line is relayed at
                # once, without another read to find that out (the caller waits on the pipe
                # again, and sees its end there).
                break

    def take_ready(self) -> None:
        if self.ready is not None:
            with contextlib.suppress(OSError):
                os.read(self.ready, 64)
            with contextlib.suppress(OSError):
                os.close(self.ready)
            self.ready = None

    def say_go(self) -> None:
        """Tell the watcher the arm's status line is out: its reason line may follow directly.
        The pipe stays open while we live (its end tells the watcher we are gone)."""
        if self.go is None or self.direct:
            return
        try:
            os.write(self.go, b"1")
            self.direct = True
        except OSError:
            pass  # (it is gone: it wrote nothing directly, and its close is resolved as always)

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def close(self) -> None:
        for fd in (self.pidfd, self.ready, self.out_fd, self.go):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.pidfd = self.ready = self.out_fd = self.go = None


__all__ = ["REASON_RE", "Child", "child_env", "reason_class"]
