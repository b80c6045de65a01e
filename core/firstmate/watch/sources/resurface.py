"""The ``resurface`` source: surface work that waited while nothing was watching.

Runs once, at a watcher's first poll, and never in a handling successor (a watcher started by
the re-arm owner while the model handles the wake its predecessor delivered: that episode is
being handled, re-announcing it would deliver the same wake twice).

Under the queue lock and in one transaction it first reopens an announced episode that newer
rows arrived behind (:func:`firstmate.store.episodes.reopen_announced`), then runs
:func:`firstmate.store.episodes.arm_check`. On ``recover`` it wakes with ``check: rearm-resurface``
only when there is something to show: queued rows, or a crew decision still open that no drain
presented (:func:`open_decisions_exist`). Otherwise it
retires the episode silently (acknowledges that generation), so an empty recovery never costs
the model a turn. The wake is not appended: the queue and the episode are its record. A watcher
that closes on this wake keeps the episode as announced instead of republishing downtime.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from firstmate.base.envnum import env_float
from firstmate.base.errors import FirstmateError, LockTimeout
from firstmate.store.home import Home
from firstmate.watch.sources.base import PollContext, Wake

REASON = "check: rearm-resurface"
KEY = "rearm-resurface"
#: Default seconds the startup transition waits for the queue lock (FM_WATCHER_STARTUP_LOCK_BOUND).
DEFAULT_STARTUP_BOUND = 10.0


class StartupLockHeld(FirstmateError):
    """A startup transition could not get the queue lock within the startup bound."""

    def __init__(self, holder_pid: int | None) -> None:
        who = f"live pid {holder_pid}" if holder_pid else "another process"
        super().__init__(f"watcher: FAILED - startup lock held by {who}")
        self.holder_pid = holder_pid


def open_decisions_exist(home: Home) -> bool:
    """True when any registered crew has an open ``needs-decision:`` that no drain presented
    yet (one the captain was shown and left open is listed on every drain, and wakes no one
    again); a read failure counts as True (when unsure, showing the model an empty recovery
    beats hiding real work)."""
    from firstmate.store import crew

    try:
        return any(crew.unseen_decisions(home, member.name) for member in crew.list(home))
    except (OSError, FirstmateError, ValueError):
        return True


@attrs.define(eq=False)
class ResurfaceSource:
    home: Home
    #: Seconds the queue lock is waited for (FM_WATCHER_STARTUP_LOCK_BOUND).
    bound: float = DEFAULT_STARTUP_BOUND
    name: str = "resurface"
    #: An ``fm checkpoint`` window (``FM_WATCH_CHECKPOINT``): an announced episode stays announced.
    skip_reopen: bool = False
    _done: bool = attrs.field(default=False, init=False)
    _covered: int = attrs.field(default=0, init=False)
    #: The generation this watcher resurfaced (it preserves that episode when it closes).
    recovered: str | None = attrs.field(default=None, init=False)

    def poll(self, ctx: PollContext) -> Wake | None:
        if self._done:
            return None
        self._done = True
        if ctx.handling_successor:
            return None
        from firstmate.store import episodes, queue
        from firstmate.store.database import Store, last_seq

        db = Store(self.home)
        try:
            with queue.locked(db, timeout=self.bound) as conn:
                # Only rows that were waiting when this watcher claimed count: a row appended
                # since is a live event, and the queued source wakes for it under its own reason.
                if not self.skip_reopen:
                    episodes.reopen_announced(conn, ctx.startup_seq)
                queued = queue.depth(conn, ctx.startup_seq) > 0
                action = episodes.arm_check(conn, queued)
                if action is not episodes.Action.RECOVER:
                    return None
                state = episodes.read(conn)
                if not isinstance(state, episodes.Episode):  # pragma: no cover - arm_check wrote it
                    return None
                if queued or open_decisions_exist(self.home):
                    self._covered = last_seq(conn)
                    self.recovered = state.generation
                    return Wake("check", KEY, REASON, append=False)
                episodes.acknowledge(conn, state.generation)
            ctx.triage(f"resurface: retired episode {state.token()} silently: nothing to show")
            return None
        except LockTimeout as exc:
            raise StartupLockHeld(exc.holder_pid) from exc
        finally:
            db.close()

    def commit(self, wake: Wake, ctx: PollContext) -> None:
        return None

    def next_due(self, ctx: PollContext) -> float | None:
        return None

    def covered_seq(self, wake: Wake) -> int:
        """Every row queued when the recovery was decided: the wake tells the model to drain."""
        return self._covered


def from_env(home: Home, env: Mapping[str, str]) -> ResurfaceSource:
    """A resurface source bounded by ``FM_WATCHER_STARTUP_LOCK_BOUND`` (default 10 s)."""
    return ResurfaceSource(
        home, bound=env_float(env, "FM_WATCHER_STARTUP_LOCK_BOUND", DEFAULT_STARTUP_BOUND),
        skip_reopen=env.get("FM_WATCH_CHECKPOINT", "") == "1",
    )


__all__ = ["KEY", "REASON", "ResurfaceSource", "StartupLockHeld", "from_env",
           "open_decisions_exist"]
