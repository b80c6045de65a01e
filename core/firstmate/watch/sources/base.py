"""The contract between the watcher and its event sources.

The watcher runs its sources in order on every poll. A source either absorbs what it saw
(logging a triage line through the context) or returns one :class:`Wake`. The watcher appends the
wake to the durable queue *first*, then calls :meth:`Source.commit` so that the source advances
its suppression markers only once the row is durable: a crash between the two re-raises the same
event rather than losing it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

import attrs

from firstmate.store.home import Home

#: The four wake kinds, which are also the four reason-line prefixes.
WAKE_KINDS = ("signal", "stale", "check", "heartbeat")


@attrs.frozen
class Wake:
    """One actionable event. ``reason`` is the exact reason line the watcher prints."""

    kind: str
    key: str
    reason: str
    #: False for wakes whose record is the queue itself (``check: rearm-resurface``).
    append: bool = True


@attrs.frozen
class PollContext:
    """What a source may use during one poll."""

    home: Home
    env: Mapping[str, str]
    #: Wall-clock seconds (time.time()) at the start of this poll.
    now: float
    #: Sequential poll number within this watcher process, starting at 1.
    poll: int
    #: Writes one line to the bounded triage log (absorbed events).
    triage: Callable[[str], None]
    #: True when this watcher is a handling successor (FM_WATCH_PREDECESSOR_ARM_PID set).
    handling_successor: bool = False
    #: Touches the watcher's beacon. A source that may block for long (several checks, each
    #: bounded by FM_CHECK_TIMEOUT) calls it between steps so a busy watcher never looks hung.
    beat: Callable[[], None] = lambda: None
    #: The newest queue sequence when this watcher claimed the singleton (its startup safe
    #: point); None when unknown. Rows above it arrived while this watcher was live.
    startup_seq: int | None = None
    #: True while a doorbell ring is waiting to be answered (a queued row, a crew line): a
    #: source working through the fleet in slices ends its slice early, so the watcher answers
    #: the ring before the rest of the pass.
    rung: Callable[[], bool] = lambda: False
    #: The doorbell's socket (readable while a ring waits), for a source that waits on
    #: something else (a tmux call) and stops waiting when it rings; None without a doorbell.
    bell_fd: int | None = None
    #: True on the watcher's full poll (its first, then one each ``FM_POLL``), False on a poll
    #: that answers a ring or a source's own deadline: a source that follows what changed may
    #: look over everything only on a full poll.
    full: bool = True


@runtime_checkable
class Source(Protocol):
    """An event source. Implementations are ``@attrs.define`` services."""

    #: Short stable name used in logs (``status``, ``stale``, ``checks``, …).
    name: str

    # A source may also set a class attribute ``doorbell = True``: it is polled when the doorbell
    # rings (it watches what rings it: queued rows, crew lines). Every other source is polled only
    # when a deadline (its ``next_due`` or ``FM_POLL``) comes, so slow work never stands between
    # a ring and its wake. In a handling successor the watcher holds a source's wake for the
    # primary's drain (:mod:`firstmate.watch.sources.handover`) and does not poll it meanwhile;
    # ``handover = True`` says a source holds its own wakes (the queued source).

    def poll(self, ctx: PollContext) -> Wake | None:
        """Look once; return the first actionable event or None when everything was absorbed."""

    def commit(self, wake: Wake, ctx: PollContext) -> None:
        """Advance suppression markers for *wake*, after the watcher made it durable."""

    def next_due(self, ctx: PollContext) -> float | None:
        """Wall-clock time at which this source wants another poll even without an event, or None."""
