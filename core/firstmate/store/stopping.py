"""Why fm stopped a watcher, recorded before its signal: so its arm knows whether to wait.

``fm arm --stop``, ``--restart`` and ``--take-over``, and an arm that replaces a wedged watcher,
stop a watcher with a TERM (:func:`firstmate.continuity.armcontrol.stop_watcher`). Just before
the signal they record in ``kv['watch.stopping']`` which watcher (pid and identity) and what
comes next: ``replaced`` (a new watcher starts, and the stopped one's arm follows it) or
``stopped`` (nothing follows).

An arm whose own watcher ended by a signal reads it. A watcher that no fm command stopped in
order to replace it (killed from outside, stopped by ``--stop``, taken by the OOM killer) has
no successor coming, so its arm says so at once, not after ``FM_ARM_SUCCESSOR_CONFIRM_TIMEOUT``.
The record is best effort on both sides: a stop is never held back by a busy or broken store,
and an arm that cannot read the record waits for a successor as it always did. Either way no
wake is lost (a failed arm is re-armed, and the rows stay queued).
"""

from __future__ import annotations

import sqlite3

from firstmate.base.errors import FirstmateError
from firstmate.store.database import Store, kv_get, kv_set

#: The ``kv`` key: ``"<pid> <identity token> <replaced|stopped>"`` of the last stop fm made.
KEY = "watch.stopping"
REPLACED = "replaced"
STOPPED = "stopped"
#: Seconds a stop waits for the store's write lock to record itself before it signals anyway.
RECORD_BOUND = 5.0


def record(db: Store, pid: int, token: str, then: str) -> None:
    """Record that fm is about to stop the watcher *pid* (identity *token*) and what follows
    (:data:`REPLACED` or :data:`STOPPED`). Never raises: the stop goes ahead regardless."""
    try:
        with db.transaction(timeout=RECORD_BOUND) as conn:
            kv_set(conn, KEY, f"{pid} {token} {then}")
    except (FirstmateError, sqlite3.Error):
        pass


def successor_expected(db: Store, pid: int, token: str | None) -> bool:
    """Whether fm stopped the watcher *pid* (identity *token*, when known) to replace it; True
    too when the record cannot be read (the arm then waits for a successor, as before)."""
    try:
        with db.reading() as conn:
            raw = kv_get(conn, KEY)
    except (FirstmateError, sqlite3.Error):
        return True
    fields = (raw or "").split()
    if len(fields) != 3 or fields[0] != str(pid) or (token is not None and fields[1] != token):
        return False
    return fields[2] == REPLACED


__all__ = ["KEY", "RECORD_BOUND", "REPLACED", "STOPPED", "record", "successor_expected"]
