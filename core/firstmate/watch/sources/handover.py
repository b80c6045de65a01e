"""The handover hold: a handling successor's wake waits for the primary's drain of the wake before.

The primary answers a wake with a drain, which presents every queued row and every unread crew
status line there is by then, including what arrived after the wake was delivered. A handling
successor that woke for one of those would wake the primary again for something it has seen.
So, in a home whose primary drains (a main drain has run: ``drain.followed.main`` exists), a
handling successor holds a wake while the newest watcher delivery has had no main drain after it,
for at most ``FM_HANDOVER_HOLD`` seconds (20; 0 never holds) from that delivery. A main drain
records the delivery it came after once its output was written and its crew-status marks
advanced, then rings the doorbell: the sources look again and find what it presented seen. A
primary that does not drain is woken when the hold runs out.

The queued source holds its own wakes, with facts it reads with its rows (one statement). The
watcher holds every other source's (:class:`HeldWakes`), reading the facts (:func:`read`) when
such a source has a wake to give; a held source is not polled until the hold is over.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

import attrs

from firstmate.base.envnum import env_float
from firstmate.base.errors import FirstmateError
from firstmate.fast.drainsteps import FOLLOWED_KEY
from firstmate.watch.sources.base import PollContext, Source, Wake

if TYPE_CHECKING:
    from firstmate.store.database import Store

#: How long a handling successor holds a wake for the primary's drain of the wake before it
#: (seconds from that wake's delivery; 0: never).
HOLD_ENV = "FM_HANDOVER_HOLD"
DEFAULT_HOLD = 20.0

#: ``(followed, newest delivery id, its time)``: the newest delivery a main drain came after
#: (a kv value, bound as the one parameter: its key), the newest delivery's id and time.
FACTS_SQL = ("SELECT (SELECT value FROM kv WHERE key = ?), (SELECT max(id) FROM deliveries), "
             "(SELECT at FROM deliveries ORDER BY id DESC LIMIT 1)")

Facts = tuple[object, object, object]
NO_FACTS: Facts = (None, None, None)


def read(store: Store | None) -> Facts:
    """The facts, read now from *store* (none when they cannot be read: nothing is held)."""
    if store is None:
        return NO_FACTS
    try:
        row = store.connection().execute(FACTS_SQL, (FOLLOWED_KEY,)).fetchone()
    except (sqlite3.Error, FirstmateError):
        return NO_FACTS
    return (row[0], row[1], row[2])


def owed(facts: Facts) -> bool:
    """Whether *facts* show a home whose primary drains with a delivery no main drain came
    after yet (a damaged mark counts as no drain ever)."""
    followed, newest, at = facts
    return (isinstance(followed, str) and followed.isascii() and followed.isdigit()
            and isinstance(newest, int) and isinstance(at, int | float)
            and newest > int(followed))


@attrs.define(eq=False)
class Handover:
    """One source's hold: when it first held for which delivery (its bound's fallback clock)."""

    _noted: tuple[object, float] = (None, 0.0)

    def until(self, ctx: PollContext, facts: Facts, what: str) -> float | None:
        """When the hold on a wake for *what* runs out, or None when nothing holds it (not a
        handling successor, no main drain ever, a drain after the newest delivery, the bound
        passed). The first hold for a delivery says so once in the triage log."""
        if not (ctx.handling_successor and owed(facts)):
            return None
        _, newest, at = facts
        assert isinstance(at, int | float)  # (owed: a number)
        first = self._noted[0] != newest
        if first:
            self._noted = (newest, ctx.now)
        # Counted from the delivery, and never from later than this source first held for it:
        # a delivery time in the future (a clock set back, a hand-edited row) holds no longer.
        until = min(float(at), self._noted[1]) + env_float(ctx.env, HOLD_ENV, DEFAULT_HOLD,
                                                           allow_zero=True)
        if ctx.now >= until:
            return None
        if first:
            ctx.triage(f"{what} waits up to {until - ctx.now:.1f}s for the primary's drain of "
                       "the wake before it (FM_HANDOVER_HOLD)")
        return until


@attrs.define(eq=False)
class HeldWakes:
    """The watcher's hold over the wakes of every source that does not hold its own: which
    sources wait (by id) until when. A held source is not polled (a check would run on every
    look), only once a ring finds the hold over (the drain rings) or the hold runs out."""

    store: Store | None
    held: dict[int, float] = attrs.Factory(dict)
    _hold: Handover = attrs.Factory(Handover)

    def released(self, rang: bool, now: float) -> set[int]:
        """At a poll's start: the held sources to poll again, no longer held."""
        if not self.held:
            return set()
        if rang and not owed(read(self.store)):
            done, self.held = set(self.held), {}
        else:
            done = {key for key, until in self.held.items() if until <= now}
            self.held = {key: until for key, until in self.held.items() if until > now}
        return done

    def holds(self, source: Source, wake: Wake, ctx: PollContext) -> bool:
        """Whether *source*'s *wake* waits (then it is held until the hold runs out)."""
        self.held.pop(id(source), None)
        if not ctx.handling_successor or getattr(source, "handover", False):
            return False
        until = self._hold.until(ctx, read(self.store), f"{source.name}: {wake.key}")
        if until is None:
            return False
        self.held[id(source)] = until
        return True


__all__ = ["DEFAULT_HOLD", "FACTS_SQL", "HOLD_ENV", "NO_FACTS", "Facts", "Handover", "HeldWakes",
           "owed", "read"]
