"""When the status source looks at every crew, and when only at the ones the change journal
names (:mod:`firstmate.store.crewchanges`: the journal, and the record the source keeps in
``state/crew/.changes-seen``).

A poll looks at the crews named since the source's last look and those it left pending (a wake
not yet committed, a line held by the quiet window, a turn end held to settle, a crew it could
not read). A write by hand (``echo >>``, ``touch`` of a marker, a mark rewritten) is in no
journal: a full pass finds it, on each of the watcher's full polls (every ``FM_POLL``) but a new
watcher's first within half ``FM_POLL`` of the last full pass (:func:`due_full`).
"""

from __future__ import annotations

from collections.abc import Mapping

from firstmate.base.envnum import env_float
from firstmate.store.crewchanges import Seen

#: The watcher's full poll interval when ``FM_POLL`` is not set (firstmate.watch.watcher).
DEFAULT_POLL = 15.0


def due_full(seen: Seen | None, full_poll: bool, first: bool, now: float,
             env: Mapping[str, str]) -> bool:
    """True when this poll looks at every crew: without a record, and on the watcher's full
    poll — except its *first* within half ``FM_POLL`` of the last full pass (a watcher that
    follows another one at once starts from its record instead of from every crew's files)."""
    if seen is None:
        return True
    if not full_poll:
        return False
    if not first:
        return True
    every = env_float(env, "FM_POLL", DEFAULT_POLL)
    return now - seen.full_at >= every / 2 or now < seen.full_at


__all__ = ["DEFAULT_POLL", "due_full"]
