"""Is a watcher watching this home right now? One side-effect-free answer for status, guards and arm.

A watcher is *healthy* when all of these hold:

* the singleton ``state/watch.lock`` is held (the kernel lock is the truth);
* its owner record names a live process whose identity (pid + start time + command-line hash)
  still matches, recorded for this home with the ``watcher`` role;
* the beacon ``state/watcher.beat`` exists, was written by that process (not older than its
  start), and is younger than ``FM_GUARD_GRACE`` (default 300 s).

The states a caller can see:

``none``          nobody holds the singleton.
``healthy``       all of the above.
``stale-beacon``  a verified live holder whose beacon is older than the grace: it is alive but
                  not polling (stopped, wedged). It is reported, never killed for its age alone.
``unverified``    the singleton is held, but the holder cannot be verified as a watcher of this
                  home that is polling: an unreadable or foreign owner record, a reused pid, or a
                  verified holder without a beacon of its own yet (starting) or any more (closing).

Nothing here creates, writes or removes a file.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Mapping
from typing import Literal

import attrs

from firstmate.base.envnum import env_float
from firstmate.store.home import Home

HealthState = Literal["none", "healthy", "stale-beacon", "unverified"]

#: The lock name and owner-record role of the watcher singleton.
LOCK_NAME = "watch"
ROLE = "watcher"
DEFAULT_GRACE = 300.0
#: psutil derives a process start time from the boot time, which /proc gives in whole seconds,
#: so a beacon may look up to a second older than the process that wrote it.
START_SLACK = 2.0


@attrs.frozen
class WatcherHealth:
    """One look at the home's watcher."""

    healthy: bool
    state: HealthState
    #: The singleton's owner record names a live, identity-matched watcher of this home (true
    #: for ``healthy`` and ``stale-beacon``, and for a verified holder without a beacon).
    verified: bool = False
    #: The lock holder's pid when one is named (also for ``unverified``), else None.
    pid: int | None = None
    #: The holder's identity token (``pid:start:cmdhash``) when its record could be read.
    identity: str | None = None
    #: Seconds since the beacon was last touched; None when there is no beacon.
    beacon_age: float | None = None
    #: The grace the verdict used (``FM_GUARD_GRACE``).
    grace: float = DEFAULT_GRACE

    def age_text(self) -> str:
        """The beacon age in whole seconds, as the status lines print it."""
        return "none" if self.beacon_age is None else str(int(max(0.0, self.beacon_age)))


def grace(env: Mapping[str, str]) -> float:
    return env_float(env, "FM_GUARD_GRACE", DEFAULT_GRACE)


def beacon_mtime(home: Home) -> float | None:
    """The beacon's modification time, or None when it is missing (or not a regular file)."""
    try:
        st = os.lstat(home.beacon)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return st.st_mtime


def watcher_health(home: Home, env: Mapping[str, str] | None = None, *,
                   now: float | None = None) -> WatcherHealth:
    """The home's watcher health. Reads the lock, the owner record and the beacon; writes nothing."""
    env = os.environ if env is None else env
    limit = grace(env)
    lock_path = home.lock_path(LOCK_NAME)
    if not home.state.is_dir() or not os.path.lexists(lock_path):
        return WatcherHealth(False, "none", grace=limit)
    from firstmate.base.errors import StateError
    from firstmate.store.locks import FileLock

    try:
        record = FileLock(lock_path, ROLE, home.root).holder()
    except StateError:
        return WatcherHealth(False, "unverified", grace=limit)
    if record is None:
        return WatcherHealth(False, "none", grace=limit)
    pid = record.known_pid
    identity = record.identity or None
    if not record.verified or record.role != ROLE or record.home != str(home.root):
        return WatcherHealth(False, "unverified", pid=pid, identity=identity, grace=limit)
    mtime = beacon_mtime(home)
    started = _started(identity)
    if mtime is None or (started is not None and mtime < started - START_SLACK):
        # A verified holder without a beacon of its own: starting up, or already closing.
        return WatcherHealth(False, "unverified", True, pid=pid, identity=identity, grace=limit)
    age = max(0.0, (time.time() if now is None else now) - mtime)
    if age >= limit:
        return WatcherHealth(False, "stale-beacon", True, pid=pid, identity=identity, beacon_age=age,
                             grace=limit)
    return WatcherHealth(True, "healthy", True, pid=pid, identity=identity, beacon_age=age, grace=limit)


def _started(token: str | None) -> float | None:
    if not token:
        return None
    from firstmate.store.identity import ProcessIdentity

    ident = ProcessIdentity.parse(token)
    return None if ident is None else ident.started


__all__ = ["LOCK_NAME", "ROLE", "HealthState", "WatcherHealth", "beacon_mtime", "grace",
           "watcher_health"]
