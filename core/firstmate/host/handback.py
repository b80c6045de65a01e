"""An acknowledged hand-back (``handback = acknowledged``): the wake handed back to main is
re-delivered, backing off (:func:`firstmate.host.config.retry_delay`), until main acknowledges
the handed-back rows themselves. The retry state is durable (``kv`` ``host.handback``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from firstmate.base.errors import FirstmateError
from firstmate.host.config import RETRIES_ENV, HostConfig, retry_delay
from firstmate.host.engine import still_queued
from firstmate.host.events import record_event
from firstmate.store.database import Store
from firstmate.store.home import Home

HANDBACK_KEY = "host.handback"


@attrs.define(eq=False)
class HandbackRetry:
    """The host's outstanding acknowledged hand-back: recorded, checked, re-delivered."""

    home: Home
    env: Mapping[str, str]
    config: HostConfig
    #: One line for the host's log.
    note: Callable[[str], None]
    #: A hand-back is still outstanding (set by :meth:`check`).
    retrying: bool = False
    #: The last store trouble logged (logged once, not at every tick).
    check_error: str | None = None

    def remember(self, reasons: Sequence[str], why: str,
                          rows: Sequence[int] = ()) -> None:
        """Record an acknowledged hand-back (delivery 1, now) for the retry.

        The rows main must acknowledge: the close's granted rows still queued; without a grant,
        the queued rows whose payload is one of the close's reason lines, else every usable row
        the branch does not hold (at most 50). An outstanding earlier hand-back is merged in.
        """
        from firstmate.store.database import kv_set
        from firstmate.store.queue import VALID_SQL

        now = time.time()
        db = Store(self.home)
        try:
            with db.transaction(timeout=10.0) as conn:
                if rows:
                    seqs = still_queued(conn, rows)
                else:
                    free = [(int(r[0]), r[1]) for r in conn.execute(
                        f"SELECT seq, payload FROM wakes WHERE {VALID_SQL} AND "
                        "coalesce(claim, '') <> 'branch' ORDER BY seq LIMIT 50")]
                    seqs = [seq for seq, payload in free if payload in reasons] or [
                        seq for seq, _ in free]
                old = _read_handback(conn)
                old_seqs = still_queued(conn, _seqs_of(old)) if old is not None else []
                merged = sorted(set(seqs) | set(old_seqs))
                if not merged:
                    conn.execute("DELETE FROM kv WHERE key = ?", (HANDBACK_KEY,))
                    self.note("hand-back leaves no row queued: nothing to re-deliver")
                    return
                lines = list(reasons)
                if old is not None and old_seqs:
                    lines += [r for r in _reasons_of(old) if r not in lines]
                delay = retry_delay(1, self.config.retry, self.config.retry_max)
                kv_set(conn, HANDBACK_KEY, json.dumps(
                    {"seqs": merged, "reasons": lines[:20], "why": why, "deliveries": 1,
                     "last_at": now, "next_at": now + delay}))
        finally:
            db.close()
        cap = max(self.config.retry, self.config.retry_max)
        self.note(f"acknowledged hand-back of rows {merged}: next delivery in {delay:g}s, then "
                  f"backing off to every {cap:g}s until main acknowledges them")

    def check(self, now: float | None = None) -> list[str] | None:
        """The outstanding acknowledged hand-back, if any: the lines to deliver again when a
        delivery is due (the record then counts it and schedules the next), else None.

        Main having acknowledged every handed-back row ends the retry (rows main acknowledged
        among several are dropped from it); so does the delivery bound, when one is set.
        Sets :attr:`retrying` to whether a hand-back is still outstanding."""
        from firstmate.store.database import kv_set

        self.retrying = False
        if not self.home.db.exists():
            return None
        now = time.time() if now is None else now
        db = None
        try:
            db = Store(self.home)
            with db.transaction(timeout=10.0) as conn:
                rec = _read_handback(conn)
                if rec is None:
                    return None
                seqs = _seqs_of(rec)
                left = still_queued(conn, seqs)
                if not left:
                    conn.execute("DELETE FROM kv WHERE key = ?", (HANDBACK_KEY,))
                    self.note(f"main acknowledged the handed-back row(s) {seqs}: retry stopped")
                    return None
                raw = rec.get("deliveries", rec.get("attempts"))
                delivered: int = raw if type(raw) is int and raw > 0 else 1
                due_at = rec.get("next_at")
                if isinstance(due_at, bool) or not isinstance(due_at, int | float):
                    due_at = 0.0
                if left != seqs:
                    rec["seqs"] = left
                    kv_set(conn, HANDBACK_KEY, json.dumps(rec))
                    self.note(f"main acknowledged part of the hand-back; still owed: {left}")
                if 0 < self.config.retries <= delivered:
                    conn.execute("DELETE FROM kv WHERE key = ?", (HANDBACK_KEY,))
                    self.note(f"gave up re-delivering the hand-back of rows {left} after "
                              f"{delivered} deliveries ({RETRIES_ENV})")
                    return None
                self.retrying = True
                if now < due_at:
                    return None
                delivered += 1
                delay = retry_delay(delivered, self.config.retry, self.config.retry_max)
                rec.update(seqs=left, deliveries=delivered, last_at=now, next_at=now + delay)
                kv_set(conn, HANDBACK_KEY, json.dumps(rec))
        except FirstmateError as exc:
            # A busy or broken store must not stop the park: try again at the next tick (and
            # log the trouble once, not every second).
            self.retrying = True
            if exc.message != self.check_error:
                self.check_error = exc.message
                self.note(f"could not check the hand-back: {exc.message}")
            return None
        finally:
            if db is not None:
                db.close()
        self.check_error = None
        reasons = _reasons_of(rec)
        bound = f" of {self.config.retries}" if self.config.retries > 0 else ""
        self.note(f"re-delivering the hand-back of rows {left} (delivery {delivered}{bound}); "
                  f"next in {delay:g}s unless main acknowledges them")
        record_event(self.home, "handback-retry", self.env, rows=left, delivery=delivered,
                     reasons=" | ".join(reasons))
        return [*reasons, f"supervision-host: handed-back wake still unacknowledged (rows "
                          f"{','.join(map(str, left))}, delivery {delivered}{bound}): run fm "
                          "wake drain, handle it, then run its acknowledgement command"]


def _read_handback(conn: Any) -> dict[str, Any] | None:
    from firstmate.store.database import kv_get

    try:
        rec = json.loads(kv_get(conn, HANDBACK_KEY) or "null")
    except (ValueError, RecursionError):
        return None
    return rec if isinstance(rec, dict) else None


def _seqs_of(rec: Mapping[str, Any]) -> list[int]:
    raw = rec.get("seqs")
    return [s for s in raw if type(s) is int][:50] if isinstance(raw, list) else []


def _reasons_of(rec: Mapping[str, Any]) -> list[str]:
    raw = rec.get("reasons")
    return [r for r in raw if isinstance(r, str)][:20] if isinstance(raw, list) else []


__all__ = ["HANDBACK_KEY", "HandbackRetry"]
