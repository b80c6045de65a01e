"""The fleet's long-lived processes as other commands see them: who holds a role's lock, how
one is started (detached, in its own session) and how it is stopped (an identity-verified TERM)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from firstmate.store.home import Home
from firstmate.store.locks import FileLock


def holder(home: Home, lock: str) -> int | None:
    """The pid of the live, verified process holding ``state/fleet/<lock>``, or None."""
    from firstmate.fleet import paths

    path = Path(paths.path(home, lock))
    if not path.exists():
        return None
    record = FileLock(path, lock, home.root).holder()
    if record is None or not record.verified:
        return None
    return int(record.pid)


@contextlib.contextmanager
def singleton(home: Home, lock: str, role: str) -> Iterator[bool]:
    """Hold ``state/fleet/<lock>`` (a kernel lock and its owner record) for the body; yields
    False, holding nothing, when another process holds it."""
    from firstmate.base import ownerlock
    from firstmate.fleet import paths

    paths.ensure(home)
    fd = ownerlock.try_acquire(paths.path(home, lock), role, home.root)
    if fd is None:
        yield False
        return
    try:
        yield True
    finally:
        ownerlock.release(fd)


def fm_argv(*args: str) -> list[str]:
    """This fm, as a child process runs it."""
    return [sys.executable, "-m", "firstmate", *args]


def start(home: Home, args: list[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start ``fm <args>`` for *home* in its own session, stdio to /dev/null."""
    child_env = {**env, "FM_HOME": os.fspath(home.root)}
    return subprocess.Popen(fm_argv(*args), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=child_env, start_new_session=True, close_fds=True)


def wait_for(check: object, deadline: float, step: float = 0.05) -> bool:
    """Poll *check* (a callable) until it is true or *deadline* seconds pass: for processes
    that announce readiness through a file or a lock, which offer nothing to wait on."""
    assert callable(check)
    end = time.monotonic() + deadline
    while True:
        if check():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(step)


def stop(home: Home, lock: str, deadline: float = 10.0) -> int | None:
    """TERM the verified holder of *lock* and wait until it let go; its pid, None if none ran."""
    pid = holder(home, lock)
    if pid is None:
        return None
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return pid
    wait_for(lambda: holder(home, lock) != pid, deadline)
    return pid


__all__ = ["fm_argv", "holder", "singleton", "start", "stop", "wait_for"]
