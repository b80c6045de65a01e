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
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import attrs

from firstmate.fast import watcherverdict
from firstmate.fast.watcherverdict import DEFAULT_GRACE, LOCK_NAME, ROLE, START_SLACK
from firstmate.store.home import Home

if TYPE_CHECKING:
    from firstmate.base.safepaths import StrPath

HealthState = Literal["none", "healthy", "stale-beacon", "unverified"]


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

    @classmethod
    def of(cls, verdict: watcherverdict.Verdict) -> WatcherHealth:
        healthy, state, verified, pid, identity, age, limit = verdict
        return cls(healthy, state, verified, pid, identity, age, limit)  # type: ignore[arg-type]

    def verdict(self) -> watcherverdict.Verdict:
        return (self.healthy, self.state, self.verified, self.pid, self.identity,
                self.beacon_age, self.grace)

    def age_text(self) -> str:
        """The beacon age in whole seconds, as the status lines print it."""
        return "none" if self.beacon_age is None else str(int(max(0.0, self.beacon_age)))


def grace(env: Mapping[str, str]) -> float:
    return watcherverdict.grace(env)


def beacon_mtime(home: Home) -> float | None:
    """The beacon's modification time, or None when it is missing (or not a regular file)."""
    return watcherverdict.beacon_mtime(home.beacon)


def watcher_health(home: Home, env: Mapping[str, str] | None = None, *,
                   now: float | None = None) -> WatcherHealth:
    """The home's watcher health (:func:`firstmate.fast.watcherverdict.read`, the holder read
    through the lock class). Reads the lock, the owner record and the beacon; writes nothing."""
    from firstmate.store.locks import FileLock

    def holder(path: StrPath) -> watcherverdict.Holder | None:
        record = FileLock(Path(path), ROLE, home.root).holder()
        if record is None:
            return None
        return record.known_pid, record.identity, record.home, record.role, record.verified

    limit = grace(os.environ if env is None else env)
    return WatcherHealth.of(watcherverdict.read(str(home.root), home.state.is_dir(),
                                                home.lock_path(LOCK_NAME), home.beacon, limit,
                                                holder, now))


__all__ = ["LOCK_NAME", "ROLE", "START_SLACK", "HealthState", "WatcherHealth", "beacon_mtime",
           "grace", "watcher_health"]
