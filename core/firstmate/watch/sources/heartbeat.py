"""The heartbeat: a periodic review wake while the fleet stays quiet, backing off as it repeats.

The interval is ``FM_HEARTBEAT`` (default 600 s) doubled for every consecutive heartbeat (the
*streak*, at most 12 doublings), capped at ``FM_HEARTBEAT_MAX`` (default 7200 s), counted from
the last heartbeat or the last wake of any other kind, whichever came later: the watcher calls
:func:`reset_streak` after every non-heartbeat wake, which zeroes the streak and restarts the
clock. Reason line ``heartbeat`` (kind and key ``heartbeat``). State: ``state/heartbeat``, one
line ``<last epoch> <streak>``; a missing record starts the clock at the first poll.
"""

from __future__ import annotations

import time

import attrs

from firstmate.base.envnum import env_float
from firstmate.store import crew as crewmod
from firstmate.store.home import Home, atomic_write
from firstmate.watch.sources.base import PollContext, Wake

DEFAULT_HEARTBEAT = 600.0
DEFAULT_HEARTBEAT_MAX = 7200.0
MAX_STREAK = 12
REASON = "heartbeat"


@attrs.frozen
class Beat:
    last: float
    streak: int


def read(home: Home) -> Beat | None:
    parts = (crewmod.read_text(home.state / "heartbeat", 128) or "").split()
    if len(parts) != 2 or not parts[1].isdigit():
        return None
    try:
        last = float(parts[0])
    except ValueError:
        return None
    return Beat(last, min(int(parts[1]), MAX_STREAK))


def write(home: Home, beat: Beat) -> None:
    atomic_write(home.state / "heartbeat", f"{beat.last:.3f} {beat.streak}\n".encode())


def reset_streak(home: Home, now: float | None = None) -> None:
    """After any non-heartbeat wake: streak back to 0 and the interval counted from *now*."""
    write(home, Beat(time.time() if now is None else now, 0))


def interval(base: float, cap: float, streak: int) -> float:
    return float(min(base * (2 ** min(max(streak, 0), MAX_STREAK)), cap))


@attrs.define(eq=False)
class HeartbeatSource:
    home: Home
    name: str = "heartbeat"
    _due: float | None = attrs.field(default=None, init=False)
    _pending: Beat | None = attrs.field(default=None, init=False)

    def poll(self, ctx: PollContext) -> Wake | None:
        self._pending = None
        beat = read(self.home)
        if beat is None:
            beat = Beat(ctx.now, 0)
            write(self.home, beat)
        base = env_float(ctx.env, "FM_HEARTBEAT", DEFAULT_HEARTBEAT)
        cap = env_float(ctx.env, "FM_HEARTBEAT_MAX", DEFAULT_HEARTBEAT_MAX)
        self._due = beat.last + interval(base, cap, beat.streak)
        if ctx.now < self._due:
            return None
        self._pending = beat
        return Wake("heartbeat", "heartbeat", REASON)

    def commit(self, wake: Wake, ctx: PollContext) -> None:
        if wake.kind != "heartbeat" or self._pending is None:
            return
        write(self.home, Beat(ctx.now, min(self._pending.streak + 1, MAX_STREAK)))
        self._pending = None

    def next_due(self, ctx: PollContext) -> float | None:
        return self._due
