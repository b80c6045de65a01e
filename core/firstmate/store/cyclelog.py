"""The arm's cycle log: one TAB-separated ``key=value`` row per observed watcher cycle.

``state/logs/cycle-exits.tsv`` is for humans and for one machine reader (``fm arm --take-over``
looks for the taken-over watcher's row). Each row::

    arm_pid=<pid>  arm_identity=<token>  watcher_pid=<pid|none>  origin=<started|attached|unknown>
    started_at=<epoch>  ended_at=<epoch>  exit_code=<rc|unknown>  signal=<none|HUP|TERM|…|unknown>
    reason=<class>  beacon_age=<s|999999>  lock_before=<pid:P|identity:I|none>
    lock_after=<pid:P|identity:I|none>  successor=<none|awaited|attached:PID>

``successor`` is ``awaited`` when the arm went on to wait for a successor watcher after this
close; once it finds one the row is rewritten to ``attached:PID`` (the successor also has a row
of its own, origin ``attached``, and a link in the store's ``cycle_links``). It stays
``awaited`` when none came, and is ``none`` when the arm did not wait.

Fields are cleaned (control characters become spaces) and cut to 512 characters by
:class:`firstmate.store.ledgers.BoundedLog`, which also caps the file (``FM_WATCH_CYCLE_LOG_MAX_BYTES``,
``FM_WATCH_CYCLE_LOG_KEEP_LINES``). The successor field is the only one ever rewritten.
"""

from __future__ import annotations

import contextlib
import signal as _signal
from collections.abc import Mapping

import attrs

from firstmate.store.home import Home

#: ``beacon_age`` written when there was no beacon to measure.
NO_BEACON = 999999

#: Reason classes (see docs/watcher.md).
REASON_CLASSES = (
    "actionable-signal", "actionable-stale", "actionable-check", "actionable-heartbeat",
    "attached-delivered-wake", "clean-exit-delivered-wake", "attached-cycle-ended",
    "unexpected-clean-exit", "nonzero-exit", "signal-exit",
    "confirmation-timeout", "arm-interrupted", "handling-handoff-failed", "stale-beacon",
    "ground-removed", "stalled-holder-replaced",
)

FIELDS = ("arm_pid", "arm_identity", "watcher_pid", "origin", "started_at", "ended_at",
          "exit_code", "signal", "reason", "beacon_age", "lock_before", "lock_after", "successor")


def lock_text(pid: int | None, identity: str | None) -> str:
    """How a lock holder is written in a row: ``pid:<p>|identity:<token>``, or ``none``."""
    if pid is None:
        return "none"
    return f"pid:{pid}|identity:{identity or 'unknown'}"


def signal_name(signum: int | None) -> str:
    """``TERM`` for 15 and so on; ``none`` for None."""
    if signum is None:
        return "none"
    try:
        return _signal.Signals(signum).name.removeprefix("SIG")
    except ValueError:
        return str(signum)


@attrs.frozen
class CycleRow:
    """One observed cycle."""

    arm_pid: int
    arm_identity: str
    watcher_pid: int | None
    origin: str
    started_at: float
    ended_at: float
    #: The watcher's exit status as a shell shows it (143 after TERM, 137 after KILL), if known.
    exit_code: int | None
    #: The signal that ended the watcher (``TERM``, ``KILL`` …), ``none``, or ``unknown``.
    signal: str
    reason: str
    beacon_age: int
    lock_before: str = "none"
    lock_after: str = "none"
    successor: str = "none"

    def fields(self) -> list[str]:
        values = (
            str(self.arm_pid), self.arm_identity or "unknown",
            "none" if self.watcher_pid is None else str(self.watcher_pid), self.origin,
            f"{self.started_at:.3f}", f"{self.ended_at:.3f}",
            "unknown" if self.exit_code is None else str(self.exit_code), self.signal,
            self.reason, str(self.beacon_age), self.lock_before, self.lock_after, self.successor,
        )
        return [f"{name}={value}" for name, value in zip(FIELDS, values, strict=True)]

    @classmethod
    def parse(cls, line: str) -> CycleRow | None:
        """The row *line* holds, or None when it is not a well-formed cycle row."""
        parts = line.rstrip("\n").split("\t")
        if len(parts) != len(FIELDS):
            return None
        values: dict[str, str] = {}
        for name, part in zip(FIELDS, parts, strict=True):
            key, sep, value = part.partition("=")
            if key != name or not sep:
                return None
            values[name] = value
        try:
            return cls(
                arm_pid=int(values["arm_pid"]),
                arm_identity=values["arm_identity"],
                watcher_pid=None if values["watcher_pid"] == "none" else int(values["watcher_pid"]),
                origin=values["origin"],
                started_at=float(values["started_at"]),
                ended_at=float(values["ended_at"]),
                exit_code=None if values["exit_code"] == "unknown" else int(values["exit_code"]),
                signal=values["signal"],
                reason=values["reason"],
                beacon_age=int(values["beacon_age"]),
                lock_before=values["lock_before"],
                lock_after=values["lock_after"],
                successor=values["successor"],
            )
        except ValueError:
            return None


def beacon_age_field(age: float | None) -> int:
    return NO_BEACON if age is None else min(NO_BEACON, int(max(0.0, age)))


def append(home: Home, row: CycleRow, env: Mapping[str, str] | None = None) -> None:
    """Append *row* to the home's cycle log (best effort: a log must never fail a cycle)."""
    from firstmate.base.errors import FirstmateError
    from firstmate.store.ledgers import cycle_log

    with contextlib.suppress(OSError, FirstmateError):
        cycle_log(home, env).append_fields(*row.fields())


def name_successor(home: Home, arm_pid: int, arm_identity: str, watcher_pid: int,
                   successor: str, env: Mapping[str, str] | None = None) -> bool:
    """Fill in the successor (``attached:PID``) of this arm's newest row for *watcher_pid* that
    still says ``awaited`` (best effort, like every write of the log)."""
    from firstmate.base.errors import FirstmateError
    from firstmate.store.ledgers import cycle_log, neutralise

    def ours(line: str) -> bool:
        row = CycleRow.parse(line)
        return (row is not None and row.arm_pid == arm_pid and row.arm_identity == arm_identity
                and row.watcher_pid == watcher_pid and row.successor == "awaited")

    def named(line: str) -> str:
        row = CycleRow.parse(line)
        assert row is not None
        fields = attrs.evolve(row, successor=successor).fields()
        return "\t".join(neutralise(field, 512) for field in fields)

    with contextlib.suppress(OSError, FirstmateError):
        return cycle_log(home, env).rewrite_last(ours, named)
    return False


def rows(home: Home, env: Mapping[str, str] | None = None) -> list[CycleRow]:
    """Every well-formed row kept, oldest first."""
    from firstmate.base.errors import FirstmateError
    from firstmate.store.ledgers import cycle_log

    try:
        lines = cycle_log(home, env).lines()
    except (OSError, FirstmateError):
        return []
    return [row for row in map(CycleRow.parse, lines) if row is not None]


__all__ = ["FIELDS", "NO_BEACON", "REASON_CLASSES", "CycleRow", "append", "beacon_age_field",
           "lock_text", "name_successor", "rows", "signal_name"]
