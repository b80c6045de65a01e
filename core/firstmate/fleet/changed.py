"""Which crews a ring makes the forwarder look at: those the change journal names since its last
look, not the host's whole fleet (:mod:`firstmate.store.crewchanges`).

Every report through fm on a joined home (a status line, a turn end, a registration that
changed) names its crew in ``state/crew/.changes`` before it rings the forwarder. The forwarder
keeps its own record of the journal, ``state/fleet/out/.changes-seen`` (never the watcher's:
each reader moves its own position), and on a ring looks only at the crews named since and the
ones whose pump has not finished (or failed). A full pass over every crew's files
(and every crew with a cursor: a crew removed by hand) runs on the forwarder's first look, every
``FM_FLEET_RESCAN`` seconds after the last one, and whenever the record cannot be trusted
(missing, unreadable, of a journal since removed or rotated, behind too much to read): a line
or a turn end written by hand, and a name the journal lost, are found there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import attrs

from firstmate.fleet.outbox import Outbox, out_dir
from firstmate.store.crewchanges import Changes, Seen

#: The forwarder's record of the change journal (in ``state/fleet/out``).
RECORD = ".changes-seen"


@attrs.define(eq=False)
class ChangedCrews:
    """The forwarder's reading of its home's change journal."""

    outbox: Outbox
    #: Seconds between full passes (``FM_FLEET_RESCAN``).
    rescan: float
    changes: Changes = attrs.field(init=False)
    #: Full passes made (what a look cost is counted by :attr:`Outbox.looked`).
    full_passes: int = attrs.field(default=0, init=False)
    #: When the last full pass was (the record's, or this process's own).
    full_at: float = attrs.field(default=0.0, init=False)
    _first: bool = attrs.field(default=True, init=False)

    def __attrs_post_init__(self) -> None:
        self.changes = Changes(self.outbox.home, os.path.join(out_dir(self.outbox.home), RECORD))

    def pending(self, now: float, busy: Iterable[str] = ()) -> list[str]:
        """The crews with something not sent yet, looked for where something may have changed;
        *busy* are crews the forwarder has not finished with (looked at again, kept pending)."""
        busy = frozenset(busy)
        seen = None if self._first else self.changes.load()
        if seen is not None and 0 <= now - seen.full_at < self.rescan:
            named = self.changes.since(seen)
            if named is not None:
                names, position = named
                # (the record's pending is what was busy at the last look; *busy* is now)
                found = self.outbox.pending(names | busy)
                self.full_at = seen.full_at
                self.changes.save(Seen(*position, busy, seen.full_at))
                return found
        self.changes.rotate()
        position = self.changes.position()  # (before the look: a name written during it is read)
        found = self.outbox.pending()
        self._first = False
        self.full_passes += 1
        self.full_at = now
        self.changes.save(Seen(*position, busy, now))
        return found

    def next_full(self, now: float) -> float:
        """Seconds until the next full pass is due (at most :attr:`rescan`)."""
        if now < self.full_at:
            return 0.0
        return max(0.0, min(self.rescan, self.full_at + self.rescan - now))


__all__ = ["RECORD", "ChangedCrews"]
