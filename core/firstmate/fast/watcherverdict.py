"""The watcher-health verdict as plain values: what the singleton's holder and the beacon add up to.

:mod:`firstmate.store.health` documents the states and wraps :func:`read` in its
``WatcherHealth`` class; ``fm status`` calls it directly. Both read the singleton's holder their
own way (the store through its lock class, with psutil where ``/proc`` cannot tell; ``fm
status`` from ``/proc`` alone, handing over when unsure) and hand it to :func:`read`.
"""

from __future__ import annotations

import os
import stat

from firstmate.base import proctoken

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from firstmate.base.safepaths import StrPath

#: The lock name and owner-record role of the watcher singleton.
LOCK_NAME = "watch"
ROLE = "watcher"
DEFAULT_GRACE = 300.0
#: psutil derives a process start time from the boot time, which /proc gives in whole seconds,
#: so a beacon may look up to a second older than the process that wrote it.
START_SLACK = 2.0

#: (healthy, state, verified, pid, identity, beacon_age, grace): ``WatcherHealth``'s fields.
Verdict = tuple[bool, str, bool, "int | None", "str | None", "float | None", float]
#: The singleton's holder as its owner record names it: ``(pid, identity, home, role,
#: verified)``, *verified* when the identity names a live process with that pid.
Holder = tuple["int | None", str, str, str, bool]


def grace(env: Mapping[str, str]) -> float:
    """``FM_GUARD_GRACE``: seconds a beacon may age before the watcher counts as stale."""
    from firstmate.base.envnum import env_float

    return env_float(env, "FM_GUARD_GRACE", DEFAULT_GRACE)


def beacon_mtime(path: StrPath) -> float | None:
    """The beacon's modification time, or None when it is missing (or not a regular file)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return st.st_mtime


def nobody(limit: float) -> Verdict:
    """Nobody holds the singleton."""
    return False, "none", False, None, None, None, limit


def unreadable(limit: float) -> Verdict:
    """The singleton is held (or its lock file cannot be probed), and its holder is unknown."""
    return False, "unverified", False, None, None, None, limit


def judge(pid: int | None, identity: str, ours: bool, mtime: float | None, now: float,
          limit: float) -> Verdict:
    """The verdict on a held singleton: *pid* and *identity* from its owner record, *ours*
    when the record is verified live and names a watcher of this home, *mtime* the beacon's."""
    token = identity or None
    if not ours:
        return False, "unverified", False, pid, token, None, limit
    fields = proctoken.parse(token) if token else None
    started = None if fields is None else fields[1]
    if mtime is None or (started is not None and mtime < started - START_SLACK):
        # A verified holder without a beacon of its own: starting up, or already closing.
        return False, "unverified", True, pid, token, None, limit
    age = max(0.0, now - mtime)
    if age >= limit:
        return False, "stale-beacon", True, pid, token, age, limit
    return True, "healthy", True, pid, token, age, limit


def read(root: str, state_dir: bool, lock: StrPath, beacon: StrPath, limit: float,
         holder: Callable[[StrPath], Holder | None], now: float | None = None) -> Verdict:
    """The verdict on the watcher of the home at *root*: nobody without a state directory
    (*state_dir* False) or a lock file, else what *holder* (reading the singleton's holder;
    None: the lock is free; :class:`~firstmate.base.errors.StateError`: it cannot be probed)
    and the beacon add up to."""
    if not state_dir or not os.path.lexists(lock):
        return nobody(limit)
    try:
        found = holder(lock)
    except Exception as exc:
        from firstmate.base.errors import StateError

        if isinstance(exc, StateError):
            return unreadable(limit)
        raise
    if found is None:
        return nobody(limit)
    pid, identity, home, role, verified = found
    if now is None:
        import time

        now = time.time()
    return judge(pid, identity, verified and role == ROLE and home == root,
                 beacon_mtime(beacon), now, limit)


__all__ = ["DEFAULT_GRACE", "LOCK_NAME", "ROLE", "START_SLACK", "Holder", "Verdict",
           "beacon_mtime", "grace", "judge", "nobody", "read", "unreadable"]
