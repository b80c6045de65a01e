"""The ``queued`` source: wake for durable rows that other processes appended.

A script, a check producer or ``fm wake append`` may add a row while a watcher is polling; the
append rings the doorbell, and this source turns the row into the cycle's reason.

Watermark design. The store fact ``watch.watermark`` is the highest sequence number some watcher
has already delivered a wake for. The source wakes when a row exists that

* has a sequence above the watermark, and
* was never presented (no actor has claimed it: a drain already showed it to someone).

The reason is the oldest such row's payload (one reason per cycle). The wake is not appended
again (``Wake.append`` is False): the row is its own durable record. When the watcher closes on
this wake, it advances the watermark to the newest such row it saw, in the same transaction as
its delivery record (see :meth:`QueuedSource.covered_seq`); a watcher that closes on a row it
appended itself advances the watermark past that row too. So a successor never wakes again for
its predecessor's row, while a row that arrived during a handover wakes the successor once.

Handover hold. A handling successor holds its wake while the primary has not drained since the
wake before it (:mod:`firstmate.watch.sources.handover`): that drain presents the rows, and a
wake for them would wake the primary again for rows it has seen.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import ClassVar

import attrs

from firstmate.base.dbconn import about_the_file, translate
from firstmate.base.wakeinput import clean
from firstmate.fast.drainsteps import FOLLOWED_KEY
from firstmate.fast.wakeactor import UNCLAIMED_SQL, VALID_SQL
from firstmate.store.database import Store, kv_get, kv_set
from firstmate.store.home import Home
from firstmate.watch.sources.base import WAKE_KINDS, PollContext, Wake
from firstmate.watch.sources.handover import NO_FACTS, Facts, Handover

#: The store fact holding the highest sequence a watcher delivered a wake for.
WATERMARK_KEY = "watch.watermark"

#: What a reason line starts with (``heartbeat`` alone, too): a payload that does is kept as it is.
_PREFIXES = ("signal:", "stale:", "check:", "heartbeat:")

#: The stored watermark with every never-presented usable row above a given sequence, in
#: order (the watermark alone, with NULL row fields, when there is none), each with what the
#: handover hold needs: the newest delivery a main drain came after, and the newest delivery's
#: id and time. The deliveries are read only when there is a row and a main drain ever ran
#: (SQLite runs a subquery in a CASE only when its branch is taken): a home that never drains,
#: and every poll that finds nothing, pays nothing for the hold.
_ROWS = (
    "SELECT m.value, seq, kind, key, payload, m.followed, "
    "CASE WHEN seq IS NOT NULL AND m.followed IS NOT NULL THEN "
    "(SELECT max(id) FROM deliveries) END, "
    "CASE WHEN seq IS NOT NULL AND m.followed IS NOT NULL THEN "
    "(SELECT at FROM deliveries ORDER BY id DESC LIMIT 1) END FROM "
    "(SELECT (SELECT value FROM kv WHERE key = ?) AS value, "
    "(SELECT value FROM kv WHERE key = ?) AS followed) AS m "
    f"LEFT JOIN wakes ON seq > ? AND {UNCLAIMED_SQL} AND {VALID_SQL} ORDER BY seq"
)


def reason_line(kind: str, payload: str) -> str:
    """*payload* as one reason line: kept when it already starts with a reason prefix, else
    prefixed with its kind (``check: <payload>``), so the arm always recognises it."""
    text = clean(payload).strip()
    if text.startswith(_PREFIXES) or text == "heartbeat":  # (no regular expression: a wake's path)
        return text
    prefix = kind if kind in WAKE_KINDS else "check"
    return f"{prefix}: {text}" if text else (prefix if prefix == "heartbeat" else f"{prefix}:")


def read_watermark(conn: sqlite3.Connection) -> int:
    """The stored watermark (0 when unset or damaged)."""
    raw = (kv_get(conn, WATERMARK_KEY) or "").strip()
    return int(raw) if raw.isascii() and raw.isdigit() else 0


def advance_watermark(conn: sqlite3.Connection, seq: int) -> int:
    """Raise the watermark to at least *seq* (never lowers it); the value afterwards."""
    value = max(read_watermark(conn), int(seq))
    kv_set(conn, WATERMARK_KEY, str(value))
    return value


@attrs.define(eq=False)
class QueuedSource:
    """Wakes for the oldest never-presented row above the watermark."""

    home: Home
    name: str = "queued"
    #: Polled when the doorbell rings: an append rings it.
    doorbell: ClassVar[bool] = True
    #: Holds its own wakes for the primary's drain, with facts its one statement reads.
    handover: ClassVar[bool] = True
    _covered: int = attrs.field(default=0, init=False)
    #: The stored watermark as last read, and its value: ``(raw text or None, sequence)``.
    _mark: tuple[str | None, int] | None = attrs.field(default=None, init=False)
    _store: Store | None = attrs.field(default=None, init=False, repr=False)
    #: From the last read: the handover hold's facts (:mod:`~firstmate.watch.sources.handover`).
    _facts: Facts = attrs.field(default=NO_FACTS, init=False)
    _hold: Handover = attrs.field(factory=Handover, init=False)
    #: When the hold in force runs out (None: no hold).
    _until: float | None = attrs.field(default=None, init=False)

    def poll(self, ctx: PollContext) -> Wake | None:
        return self.look(ctx.handling_successor, lambda: ctx)

    def look(self, successor: bool, context: Callable[[], PollContext]) -> Wake | None:
        """:meth:`poll` as the watcher's answer to a ring makes it: *successor* is the
        context's ``handling_successor``, and *context* makes the context itself, called only
        when a hold is weighed (a row, a handling successor, a main drain ever), so a ring that
        wakes for a row builds none."""
        if self._store is None:
            self._store = Store(self.home)
        rows = self._rows()
        self._until = (self._hold.until(context(), self._facts, f"queued: row {rows[0][0]}")
                       if rows and successor and self._facts[0] is not None else None)
        if not rows or self._until is not None:
            self._covered = 0
            return None
        _, kind, key, payload = rows[0]
        self._covered = int(rows[-1][0])
        return Wake(str(kind), str(key), reason_line(str(kind), str(payload)), append=False)

    def _rows(self) -> list[tuple[int, str, str, str]]:
        """The never-presented rows above the watermark, in order: one statement, which reads
        the watermark with them. The rows are selected above the watermark this source read
        last (it moves only when a watcher closes); when the stored one differs, they are read
        again above that one."""
        assert self._store is not None
        conn = self._store.connection()
        try:
            if self._mark is not None:
                raw, mark = self._mark
                found = conn.execute(_ROWS, (WATERMARK_KEY, FOLLOWED_KEY, mark)).fetchall()
                if found and found[0][0] == raw:
                    self._facts = found[0][5:8]
                    return [row[1:5] for row in found if row[1] is not None]
            with self._store.reading() as conn:
                raw = kv_get(conn, WATERMARK_KEY)
                mark = read_watermark(conn)
                found = conn.execute(_ROWS, (WATERMARK_KEY, FOLLOWED_KEY, mark)).fetchall()
        except sqlite3.Error as exc:
            if about_the_file(exc):
                raise translate(self._store.path, exc) from exc
            raise
        self._mark = (raw, mark)
        self._facts = found[0][5:8] if found else NO_FACTS
        return [row[1:5] for row in found if row[1] is not None]

    def commit(self, wake: Wake, ctx: PollContext) -> None:
        # The watermark moves with the delivery record (watcher close), not here.
        return None

    def next_due(self, ctx: PollContext) -> float | None:
        return self._until  # (a hold in force: the wake is due when it runs out)

    def covered_seq(self, wake: Wake) -> int:
        """The newest row this source's last wake stands for (the watermark to advance to)."""
        return self._covered

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
        self._store = None


__all__ = ["WATERMARK_KEY", "QueuedSource", "advance_watermark", "read_watermark", "reason_line"]
