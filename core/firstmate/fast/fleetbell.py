"""A joined home's forwarder, rung after every crew report (standard library only).

On a home that joined a fleet (``fm fleet join``), ``fm crew status`` and ``fm crew turn-ended``
ring the forwarder's doorbell after their line is written, so it is sent to the primary at
once. A report that finds no forwarder running starts one (at most one start per
:data:`RESTART_AFTER` seconds): a forwarder killed, crashed or gone with a reboot comes back with
the next report, and nothing is lost meanwhile, since the crews' logs are the outbox.

On any other home this costs one failed ``open``: the forwarder's lock file exists only on a
joined home.
"""

from __future__ import annotations

import os
import sys
import time

DIR = "fleet"
LOCK = "forward.lock"
BELL = "forward.bell"
SPAWNED = "forward.spawned"
#: Seconds between two starts of a forwarder by reports (one that cannot start is not retried
#: by every report of a busy fleet).
RESTART_AFTER = 5.0


def ring(root: str) -> None:
    """Wake the forwarder of the home at *root*, or start it; never raises, never blocks."""
    directory = os.path.join(root, "state", DIR)
    try:
        fd = os.open(os.path.join(directory, LOCK),
                     os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return  # not a joined home
    try:
        import fcntl

        try:
            # The forwarder holds it exclusively: a shared lock is refused while it runs.
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            running = True
        else:
            running = False
    finally:
        os.close(fd)
    if running:
        from firstmate.fast import bell

        bell.ring_address(os.path.join(directory, BELL))
    else:
        start(root)


def start(root: str) -> bool:
    """Start the forwarder of the home at *root* in its own session (stdio to /dev/null),
    unless one was started less than :data:`RESTART_AFTER` seconds ago. True when started."""
    stamp = os.path.join(root, "state", DIR, SPAWNED)
    try:
        if time.time() - os.lstat(stamp).st_mtime < RESTART_AFTER:
            return False
    except FileNotFoundError:
        pass
    except OSError:
        return False
    try:
        fd = os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            os.utime(fd)
        finally:
            os.close(fd)
        env = dict(os.environ)
        env["FM_HOME"] = root
        null = os.devnull
        os.posix_spawn(sys.executable, [sys.executable, "-m", "firstmate", "fleet", "forward"],
                       env, setsid=True,
                       file_actions=[(os.POSIX_SPAWN_OPEN, 0, null, os.O_RDONLY, 0),
                                     (os.POSIX_SPAWN_OPEN, 1, null, os.O_WRONLY, 0),
                                     (os.POSIX_SPAWN_OPEN, 2, null, os.O_WRONLY, 0)])
    except OSError:
        return False
    return True


__all__ = ["BELL", "DIR", "LOCK", "RESTART_AFTER", "SPAWNED", "ring", "start"]
