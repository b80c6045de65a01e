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

Handover hold. The primary answers a wake with a drain, which presents every row queued by then,
including rows that arrived after the wake was delivered: a handling successor that woke for
such a row would wake the primary again for a row it has seen. So, in a home whose primary
drains (a main drain has run), a handling successor holds its wake while the newest watcher
delivery has had no main drain after it (``drain.followed.main``), for at most
``FM_HANDOVER_HOLD`` seconds from that delivery. The drain claims the rows and rings the
doorbell, and the source finds nothing left to wake for; a row after the drain wakes at once;
a primary that does not drain is woken when the hold runs out (this source's ``next_due``).
"""

from __future__ import annotations

import re
import sqlite3
from typing import ClassVar

import attrs

from firstmate.base.dbconn import about_the_file, translate
from firstmate.base.envnum import env_float
from firstmate.base.wakeinput import clean
from firstmate.fast.drainsteps import FOLLOWED_KEY
from firstmate.fast.wakeactor import UNCLAIMED_SQL, VALID_SQL
from firstmate.store.database import Store, kv_get, kv_set
from firstmate.store.home import Home
from firstmate.watch.sources.base import WAKE_KINDS, PollContext, Wake

#: The store fact holding the highest sequence a watcher delivered a wake for.
WATERMARK_KEY = "watch.watermark"

_REASON = re.compile(r"(signal:|stale:|check:|heartbeat($|:))")

#: How long a handling successor holds a wake for the primary's drain of the wake before it
#: (seconds from that wake's delivery; 0: never).
HOLD_ENV = "FM_HANDOVER_HOLD"
DEFAULT_HOLD = 20.0

#: The stored watermark with every never-presented usable row above a given sequence, in
#: order (the watermark alone, with NULL row fields, when there is none), each with what the
#: handover hold needs: the newest delivery a main drain came after, and the newest delivery's
#: id and time.
_ROWS = (
    "SELECT m.value, seq, kind, key, payload, m.followed, m.newest, m.newest_at FROM "
    "(SELECT (SELECT value FROM kv WHERE key = ?) AS value, "
    "(SELECT value FROM kv WHERE key = ?) AS followed, "
    "(SELECT max(id) FROM deliveries) AS newest, "
    "(SELECT at FROM deliveries ORDER BY id DESC LIMIT 1) AS newest_at) AS m "
    f"LEFT JOIN wakes ON seq > ? AND {UNCLAIMED_SQL} AND {VALID_SQL} ORDER BY seq"
)


def reason_line(kind: str, payload: str) -> str:
    """*payload* as one reason line: kept when it already starts with a reason prefix, else
    prefixed with its kind (``check: <payload>``), so the arm always recognises it."""
    text = clean(payload).strip()
    if _REASON.match(text):
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
    _covered: int = attrs.field(default=0, init=False)
    #: The stored watermark as last read, and its value: ``(raw text or None, sequence)``.
    _mark: tuple[str | None, int] | None = attrs.field(default=None, init=False)
    _store: Store | None = attrs.field(default=None, init=False, repr=False)
    #: From the last read: ``(followed, newest delivery id, its time)`` (see the hold above).
    _handover: tuple[object, object, object] = attrs.field(default=(None, None, None),
                                                           init=False)
    #: When the hold in force runs out (None: no hold); the delivery it holds for, and when
    #: this source first held for it.
    _until: float | None = attrs.field(default=None, init=False)
    _noted: tuple[object, float] = attrs.field(default=(None, 0.0), init=False)

    def poll(self, ctx: PollContext) -> Wake | None:
        if self._store is None:
            self._store = Store(self.home)
        rows = self._rows()
        if not rows or (ctx.handling_successor and self._holding(ctx, rows[0][0])):
            self._covered = 0
            if not rows:
                self._until = None
            return None
        self._until = None
        _, kind, key, payload = rows[0]
        self._covered = int(rows[-1][0])
        return Wake(str(kind), str(key), reason_line(str(kind), str(payload)), append=False)

    def _holding(self, ctx: PollContext, seq: int) -> bool:
        """Whether a wake for row *seq* waits for the primary's drain (the hold above)."""
        followed, newest, at = self._handover
        if not (isinstance(followed, str) and followed.isascii() and followed.isdigit()
                and isinstance(newest, int) and isinstance(at, int | float)
                and newest > int(followed)):
            return False  # no main drain yet, or one came after the newest delivery
        first = self._noted[0] != newest
        if first:
            self._noted = (newest, ctx.now)
        # Counted from the delivery, and never from later than this source first held for it:
        # a delivery time in the future (a clock set back, a hand-edited row) holds no longer.
        until = min(float(at), self._noted[1]) + env_float(ctx.env, HOLD_ENV, DEFAULT_HOLD,
                                                           allow_zero=True)
        if ctx.now >= until:
            self._until = None
            return False
        self._until = until
        if first:
            ctx.triage(f"queued: row {seq} waits up to {until - ctx.now:.1f}s for the "
                       "primary's drain of the wake before it (FM_HANDOVER_HOLD)")
        return True

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
                    self._handover = found[0][5:8]
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
        self._handover = found[0][5:8] if found else (None, None, None)
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


__all__ = ["DEFAULT_HOLD", "HOLD_ENV", "WATERMARK_KEY", "QueuedSource", "advance_watermark",
           "read_watermark", "reason_line"]
