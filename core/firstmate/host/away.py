"""Away mode: the captain is away, the away record says so, and a return brief says what happened.

``state/away`` (:attr:`firstmate.store.home.Home.away_record`) is the away record: one JSON object
holding when away mode began, the last wake sequence at that moment, an optional note, and the
*posture contract* - the rules that hold while the captain is away (check rows may be granted to
the supervision branch, captain decisions wait for the return brief, …). Its mere presence is the
posture: grants, the turn-end guard and the harness hooks only ask whether it exists.

While away, the *away owner* is the supervision host parked on the home (it holds
``state/host.lock``). The turn-end guard accepts that owner, when verified live and the
watcher beacon is fresh within the poll-derived grace (``max(FM_GUARD_GRACE, FM_POLL + 60)``),
in place of a live watcher: between two host cycles no watcher may hold the lock and nothing is
wrong.

``fm away off`` keeps the finished period in the store (``kv`` key ``away.last``) so that
``fm away brief`` can still describe it after the captain is back.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from firstmate.base.errors import StateError
from firstmate.base.safepaths import refuse_non_directory
from firstmate.store.home import Home, atomic_write, refuse_symlink

RECORD_VERSION = 1
#: The away owner's lock (``state/host.lock``): held by the parked supervision host.
HOST_LOCK_NAME = "host"
HOST_ROLE = "supervision-host"
LAST_KEY = "away.last"
MAX_NOTE = 500

#: The posture contract written into every away record (and read back to the branch engine).
DEFAULT_CONTRACT = (
    "While away, check rows (main-owned while attended) may be granted to the supervision branch.",
    "The branch handles routine wakes and records one outcome per wake; outcomes that need the "
    "captain wait for the return brief (fm away brief).",
    "The branch never answers a crew's needs-decision on the captain's behalf.",
    "Main is woken only when a wake is handed back (a 'supervision-host: <why>' line).",
)


@attrs.frozen
class AwayRecord:
    since: float
    since_seq: int = 0
    note: str = ""
    contract: tuple[str, ...] = DEFAULT_CONTRACT
    #: False when the file exists but could not be read as a record (the posture still holds).
    valid: bool = True

    def to_json(self) -> dict[str, object]:
        return {"version": RECORD_VERSION, "posture": "away", "since": self.since,
                "since_seq": self.since_seq, "note": self.note, "contract": list(self.contract)}


@attrs.frozen
class AwayPeriod:
    """One away period: the current one (``until`` None) or the last finished one."""

    since: float
    until: float | None
    since_seq: int
    note: str = ""


def _clean_note(note: str) -> str:
    from firstmate.store.queue import clean

    return clean(note, MAX_NOTE).strip()


def is_away(home: Home) -> bool:
    return os.path.lexists(home.away_record)


def read_record(home: Home) -> AwayRecord | None:
    """The away record, None when away mode is off. An unreadable record still means away."""
    path = home.away_record
    refuse_non_directory(home.state)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return AwayRecord(since=time.time(), valid=False)
    try:
        refuse_symlink(path)
        with open(path, "rb") as fh:
            obj = json.loads(fh.read(65536))
    except (OSError, ValueError, StateError, RecursionError):
        return AwayRecord(since=st.st_mtime, valid=False)
    if not isinstance(obj, dict) or obj.get("version") != RECORD_VERSION:
        return AwayRecord(since=st.st_mtime, valid=False)
    since, seq = obj.get("since"), obj.get("since_seq")
    note, contract = obj.get("note"), obj.get("contract")
    if isinstance(since, bool) or not isinstance(since, int | float):
        return AwayRecord(since=st.st_mtime, valid=False)
    return AwayRecord(
        since=float(since), since_seq=seq if type(seq) is int else 0,
        note=note if isinstance(note, str) else "",
        contract=tuple(c for c in contract if isinstance(c, str))
        if isinstance(contract, list) else DEFAULT_CONTRACT,
    )


def turn_on(home: Home, note: str = "", *, now: float | None = None) -> tuple[AwayRecord, bool]:
    """Write the away record; ``(record, already)``. An existing valid record is kept as is."""
    from firstmate.store.database import last_seq, open_store

    home.ensure()
    current = read_record(home)
    if current is not None and current.valid:
        return current, True
    db = open_store(home)
    try:
        with db.reading() as conn:
            seq = last_seq(conn)
    finally:
        db.close()
    record = AwayRecord(since=time.time() if now is None else now, since_seq=seq,
                        note=_clean_note(note))
    atomic_write(home.away_record, (json.dumps(record.to_json(), sort_keys=True) + "\n").encode())
    return record, False


def turn_off(home: Home, *, now: float | None = None) -> AwayRecord | None:
    """Remove the away record, keeping the period for the return brief. None when it was off."""
    from firstmate.store.database import kv_set, open_store

    current = read_record(home)
    if current is None:
        return None
    until = time.time() if now is None else now
    db = open_store(home)
    try:
        with db.transaction(timeout=10.0) as conn:
            kv_set(conn, LAST_KEY, json.dumps({"since": current.since, "until": until,
                                               "since_seq": current.since_seq,
                                               "note": current.note}, sort_keys=True))
    finally:
        db.close()
    try:
        os.unlink(home.away_record)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StateError(f"cannot remove {home.away_record}: {exc.strerror}; remove it by hand") \
            from exc
    return current


def last_period(home: Home) -> AwayPeriod | None:
    """The current away period, else the last finished one, else None."""
    record = read_record(home)
    if record is not None:
        return AwayPeriod(record.since, None, record.since_seq, record.note)
    if not home.db.exists():
        return None
    from firstmate.store.database import Store, kv_get

    db = Store(home)
    try:
        with db.reading() as conn:
            raw = kv_get(conn, LAST_KEY)
    finally:
        db.close()
    try:
        obj = json.loads(raw or "")
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    since, until, seq = obj.get("since"), obj.get("until"), obj.get("since_seq")
    if not isinstance(since, int | float) or not isinstance(until, int | float):
        return None
    note = obj.get("note")
    return AwayPeriod(float(since), float(until), seq if type(seq) is int else 0,
                      note if isinstance(note, str) else "")


# --- the away owner ---------------------------------------------------------------------------


@attrs.frozen
class AwayFacts:
    """What the turn-end guard needs to know about away mode."""

    on: bool = False
    owner_pid: int | None = None
    owner_live: bool = False
    beacon_age: float | None = None
    grace: float = 0.0

    @property
    def supervising(self) -> bool:
        """Away, the owner verified live, and the beacon fresh within the away grace."""
        return (self.on and self.owner_live and self.beacon_age is not None
                and self.beacon_age < self.grace)


def away_grace(env: Mapping[str, str]) -> float:
    """``max(FM_GUARD_GRACE, FM_POLL + 60)``: the owner restarts cycles only between wakes."""
    from firstmate.base.envnum import env_float
    from firstmate.store.health import grace

    return max(grace(env), env_float(env, "FM_POLL", 15.0) + 60.0)


def host_lock(home: Home) -> Any:
    from firstmate.store.locks import FileLock

    return FileLock(home.lock_path(HOST_LOCK_NAME), HOST_ROLE, home.root)


def away_owner(home: Home) -> tuple[int | None, bool]:
    """(pid, verified live) of the parked supervision host, (None, False) when none."""
    if not home.state.is_dir():
        return None, False
    try:
        record = host_lock(home).holder()
    except StateError:
        return None, False
    if record is None:
        return None, False
    live = bool(record.verified and record.role == HOST_ROLE and record.home == str(home.root))
    return record.known_pid, live


def away_facts(home: Home, env: Mapping[str, str] | None = None, *,
               now: float | None = None) -> AwayFacts:
    env = os.environ if env is None else env
    if not is_away(home):
        return AwayFacts()
    from firstmate.store.health import beacon_mtime

    pid, live = away_owner(home)
    mtime = beacon_mtime(home)
    age = None if mtime is None else max(0.0, (time.time() if now is None else now) - mtime)
    return AwayFacts(True, pid, live, age, away_grace(env))


# --- the return brief -------------------------------------------------------------------------


#: Cycle-log reasons that are not a lapse (a wake was delivered, or another arm followed).
BENIGN_CYCLES = ("attached-delivered-wake", "clean-exit-delivered-wake", "attached-cycle-ended")


@attrs.frozen
class Brief:
    """What happened while the captain was away (``fm away brief``)."""

    period: AwayPeriod | None
    handled: tuple[dict[str, Any], ...] = ()
    handed_back: tuple[dict[str, Any], ...] = ()
    outcomes: tuple[dict[str, Any], ...] = ()
    deliveries: tuple[str, ...] = ()
    #: ``handling`` (a wake is being handled now), ``downtime`` (a gap), or None.
    episode: str | None = None
    episode_kind: str | None = None
    cycle_failures: tuple[str, ...] = ()
    queued_main: int = 0
    held_branch: int = 0
    decisions: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        period = None if self.period is None else attrs.asdict(self.period)
        in_progress = self.episode if self.episode_kind == "handling" else None
        gaps = [f"open downtime episode {self.episode}"] if self.episode_kind == "downtime" else []
        gaps += [f"cycle ended without a wake: {c}" for c in self.cycle_failures]
        return {
            "away": period, "handled": list(self.handled), "handed_back": list(self.handed_back),
            "outcomes": list(self.outcomes), "deliveries": list(self.deliveries),
            "in_progress": in_progress, "gaps": gaps, "queued_main": self.queued_main,
            "held_branch": self.held_branch, "open_decisions": list(self.decisions),
        }

    def lines(self, now: float | None = None) -> list[str]:
        now = time.time() if now is None else now
        if self.period is None:
            return ["AWAY RETURN BRIEF: away mode has not been used in this home "
                    "(fm away on starts it)."]
        p = self.period
        end = now if p.until is None else p.until
        state = "still away" if p.until is None else f"back at {_iso(p.until)}"
        out = [f"AWAY RETURN BRIEF: away since {_iso(p.since)} ({_span(end - p.since)}; {state})"
               + (f" - note: {p.note}" if p.note else "")]
        out.append(f"HANDLED BY THE SUPERVISION HOST: {len(self.handled)} wake(s)")
        out += [f"  {_iso(e.get('at'))} {e.get('reasons', '')} -> handled "
                f"({e.get('outcomes', 0)} outcome(s))" for e in self.handled[-20:]]
        if self.handed_back:
            out.append(f"HANDED BACK TO MAIN: {len(self.handed_back)} wake(s)")
            out += [f"  {_iso(e.get('at'))} {e.get('reasons', '')} -> supervision-host: "
                    f"{e.get('why', '')}" for e in self.handed_back[-20:]]
        if self.outcomes:
            out.append(f"BRANCH OUTCOMES: {len(self.outcomes)}")
            out += [f"  {_iso(o.get('at'))}{' [captain]' if o.get('captain') else ''} "
                    f"{o.get('text', '')}" for o in self.outcomes[-40:]]
        if self.deliveries:
            out.append(f"WAKES DELIVERED WHILE AWAY: {len(self.deliveries)}")
            out += [f"  {line}" for line in self.deliveries[:20]]
        if self.episode_kind == "handling":
            out.append(f"IN PROGRESS: a wake is being handled right now (episode {self.episode});"
                       " this is not downtime.")
        gaps = []
        if self.episode_kind == "downtime":
            gaps.append(f"  open downtime episode {self.episode}: the fleet went unwatched at "
                        "some point; run fm wake drain and acknowledge it")
        gaps += [f"  cycle ended without a wake: {c}" for c in self.cycle_failures[-20:]]
        out.append(f"GAPS: {len(gaps)}" if gaps else "GAPS: none")
        out += gaps
        if self.queued_main:
            out.append(f"QUEUED FOR MAIN: {self.queued_main} row(s); run fm wake drain")
        if self.held_branch:
            out.append(f"HELD BY THE SUPERVISION BRANCH: {self.held_branch} row(s)")
        if self.decisions:
            out.append(f"OPEN DECISIONS: {len(self.decisions)}")
            out += [f"  {d}" for d in self.decisions[:40]]
        return out


def _iso(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "?"
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(float(value)))


def _span(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def brief(home: Home, env: Mapping[str, str] | None = None) -> Brief:
    """Gather the return brief for the current (or last) away period. Reads only."""
    env = os.environ if env is None else env
    period = last_period(home)
    if period is None:
        return Brief(None)
    since = period.since
    until = period.until if period.until is not None else float("inf")

    def inside(at: object) -> bool:
        return isinstance(at, int | float) and since <= float(at) <= until

    from firstmate.host.events import events as host_events

    events = [e for e in host_events(home, env) if inside(e.get("at"))]
    handled = tuple(e for e in events if e.get("type") == "turn" and e.get("handled"))
    back = tuple(e for e in events if e.get("type") == "handback")
    outcomes = tuple(e for e in events if e.get("type") == "outcome")
    episode = kind = None
    deliveries: tuple[str, ...] = ()
    queued = held = 0
    if home.db.exists():
        from firstmate.store import deliveries as ledger
        from firstmate.store import episodes, queuestatus
        from firstmate.store.database import Store

        db = Store(home)
        try:
            with db.reading() as conn:
                deliveries = tuple(d.reason for d in reversed(ledger.recent(conn)) if inside(d.at))
                state = episodes.read(conn)
                if isinstance(state, episodes.Episode) and state.open:
                    episode, kind = state.token(), state.kind
                queued = queuestatus.pending_count(conn, "main")
                held = queuestatus.pending_count(conn, "branch")
        finally:
            db.close()
    from firstmate.store import cyclelog

    failures = tuple(
        f"{_iso(row.ended_at)} {row.reason} (arm {row.arm_pid}, watcher {row.watcher_pid})"
        for row in cyclelog.rows(home, env)
        if inside(row.ended_at) and not row.reason.startswith("actionable")
        and row.reason not in BENIGN_CYCLES
    )
    return Brief(period, handled, back, outcomes, deliveries, episode, kind, failures, queued,
                 held, _decisions(home))


def _decisions(home: Home) -> tuple[str, ...]:
    from firstmate.base.errors import FirstmateError
    from firstmate.store import crew

    found: list[str] = []
    try:
        for member in crew.list(home):
            for decision in crew.open_decisions(home, member.name):
                found.append(f"{member.name} [key={decision.key}] {decision.note}")
    except (OSError, FirstmateError, ValueError):
        found.append("(the crews' decisions could not be read; run fm crew list)")
    return tuple(found)


def status_lines(record: AwayRecord | None, owner: tuple[int | None, bool],
                 now: float | None = None) -> Sequence[str]:
    if record is None:
        return ["away: off"]
    now = time.time() if now is None else now
    pid, live = owner
    lines = [f"away: on since {_iso(record.since)} ({_span(now - record.since)})"
             + ("" if record.valid else " (record unreadable; fm away off clears it)")]
    if record.note:
        lines.append(f"note: {record.note}")
    lines.append(f"away owner: supervision host pid {pid}" if live and pid
                 else "away owner: none (wakes go to main)")
    lines += [f"contract: {rule}" for rule in record.contract]
    return lines


__all__ = [
    "DEFAULT_CONTRACT",
    "HOST_LOCK_NAME",
    "HOST_ROLE",
    "AwayFacts",
    "AwayPeriod",
    "AwayRecord",
    "Brief",
    "away_facts",
    "away_grace",
    "away_owner",
    "brief",
    "host_lock",
    "is_away",
    "last_period",
    "read_record",
    "status_lines",
    "turn_off",
    "turn_on",
]
