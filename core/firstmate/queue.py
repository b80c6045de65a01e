"""The durable wake queue: append, per-actor drain (claim + present) and acknowledgement.

A row is ``seq`` (monotonic, never reused), ``at`` (epoch seconds), ``kind`` (signal, stale,
check, heartbeat), ``key`` and ``payload`` (the reason line). Two actors consume the queue:
``main`` (the primary session) and ``branch`` (a supervision branch holding a grant, see
:mod:`firstmate.grants`). Every presented row is claimed by exactly one actor in the same
transaction that presents it, and an acknowledgement only ever deletes the acknowledging actor's
own rows at or below its cutoff.

Every mutation holds the queue lock (``state/queue.lock``, a kernel lock that dies with its
holder) *and* a ``BEGIN IMMEDIATE`` transaction, so a process killed at any instant leaves the
whole step or none of it. Appends and acknowledgements wait for the lock as long as they must; a
drain bounds its wait with ``FM_STATUS_PRESENTATION_LOCK_TIMEOUT`` (default 10 s) and, when the
bound runs out, changes nothing and says so in one line.

Appending is :mod:`firstmate.appendpath` (attrs-free, shared with the ``fm wake append`` fast
path); the input rules are :mod:`firstmate.wakeinput`. Both are re-exported here.

Text hygiene: keys and payloads are stored on one line. TAB, CR, LF and other line breaks become
spaces, terminal escape sequences and other control characters are removed, and a payload longer
than :data:`PAYLOAD_MAX` characters is cut and ends with :data:`TRUNCATION_MARKER`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

import attrs

from firstmate import episodes
from firstmate.envnum import decimal
from firstmate.errors import FirstmateError, LockTimeout, UsageError
from firstmate.store import SET_ASIDE_KEEP, Store, advance_seq, last_seq
from firstmate.wakeinput import KEY_MAX, KINDS, PAYLOAD_MAX, TRUNCATION_MARKER, clean, validate

ACTORS = ("main", "branch")
ACTOR_ENV = "FM_SUPERVISION_ACTOR"
LOCK_TIMEOUT_ENV = "FM_STATUS_PRESENTATION_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 10
#: Unusable rows quoted verbatim in a retirement report before the remainder is only counted.
REPORT_SHOWN = 20

#: SQL predicate for a row that can be claimed, presented and acknowledged. (Text that is not
#: valid UTF-8 passes this and is caught when the row is decoded for presentation.)
VALID_SQL = (
    "(seq > 0 AND typeof(at) IN ('integer', 'real')"
    " AND typeof(kind) = 'text' AND kind IN ('signal', 'stale', 'check', 'heartbeat')"
    " AND typeof(key) = 'text' AND length(trim(key)) > 0 AND typeof(payload) = 'text')"
)
_UNCLAIMED_SQL = "(claim IS NULL OR claim NOT IN ('main', 'branch'))"

@attrs.frozen
class WakeRow:
    seq: int
    at: float
    kind: str
    key: str
    payload: str

    def line(self) -> str:
        """The presentation line ``<seq>\\t<kind>\\t<key>\\t<payload>``."""
        return f"{self.seq}\t{clean(self.kind)}\t{clean(self.key)}\t{clean(self.payload)}"

    def to_json(self) -> dict[str, object]:
        return {"seq": self.seq, "at": self.at, "kind": self.kind, "key": clean(self.key),
                "payload": clean(self.payload)}


def ack_command(through: int, generation: str, suffix: str = "") -> str:
    return f"fm wake drain --ack-through {through} --recovery-generation {generation}{suffix}"


@attrs.frozen
class DrainResult:
    """What one drain presented. ``ack_command`` is None when nothing needs acknowledging."""

    actor: str
    rows: tuple[WakeRow, ...] = ()
    ack_through: int | None = None
    generation: str | None = None
    ack_command: str | None = None
    #: Diagnostics for stderr (retired unusable rows, a reclaimed grant).
    notices: tuple[str, ...] = ()
    #: The one-line WAKE ROWS HELD BY SUPERVISION BRANCH advisory (stdout).
    held: str | None = None
    #: The one-line WAKE DRAIN SKIPPED advisory (stdout); nothing was changed.
    skipped: str | None = None

    @property
    def ack_required(self) -> str | None:
        if self.ack_command is None:
            return None
        return f"WAKE_ACK_REQUIRED: after handling completes run {self.ack_command}"

    def to_json(self) -> dict[str, object]:
        return {
            "actor": self.actor, "rows": [r.to_json() for r in self.rows],
            "ack_through": self.ack_through, "generation": self.generation,
            "ack_command": self.ack_command, "ack_required": self.ack_required,
            "notices": list(self.notices), "held": self.held, "skipped": self.skipped,
        }


@attrs.frozen
class AckResult:
    actor: str
    through: int
    generation: str
    #: Rows this acknowledgement deleted.
    consumed: int
    #: The episode of *generation* is retired (by this call or already).
    retired: bool
    #: The episode moved on to another generation; the notices name the remedy.
    moved: bool
    notices: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"actor": self.actor, "through": self.through, "generation": self.generation,
                "consumed": self.consumed, "retired": self.retired, "moved": self.moved,
                "notices": list(self.notices)}


# --- inputs ----------------------------------------------------------------------------------


def resolve_actor(actor: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """*actor*, else ``FM_SUPERVISION_ACTOR``, else ``main``; anything else is a UsageError."""
    if actor is None:
        env = os.environ if env is None else env
        value = env.get(ACTOR_ENV, "").strip() or "main"
        if value not in ACTORS:
            raise UsageError(f"unknown {ACTOR_ENV} {clean(value)[:40]!r} (expected main or branch)")
        return value
    if actor not in ACTORS:
        raise UsageError(f"unknown supervision actor {clean(actor)[:40]!r} (expected main or branch)")
    return actor


def lock_timeout(env: Mapping[str, str] | None = None) -> int:
    """``FM_STATUS_PRESENTATION_LOCK_TIMEOUT``: a positive integer of seconds, junk → 10."""
    raw = (os.environ if env is None else env).get(LOCK_TIMEOUT_ENV, "").strip()
    if raw.isascii() and raw.isdigit() and int(raw) > 0:
        return int(raw)
    return DEFAULT_LOCK_TIMEOUT


def _command_suffix(actor: str, env: Mapping[str, str] | None) -> str:
    # The printed command must act as the same actor: a branch that chose its actor with
    # --actor (not through its environment) gets the flag spelled out.
    if actor == "main":
        return ""
    env = os.environ if env is None else env
    return "" if env.get(ACTOR_ENV, "").strip() == "branch" else " --actor branch"


# --- locking ---------------------------------------------------------------------------------


@contextlib.contextmanager
def locked(db: Store, *, timeout: float | None = None) -> Iterator[sqlite3.Connection]:
    """Hold the queue lock and a ``BEGIN IMMEDIATE`` transaction; commit on success.

    *timeout* None waits as long as it must; otherwise both waits share that many seconds and
    :class:`LockTimeout` is raised when they run out. Not re-entrant.
    """
    from firstmate.locks import FileLock

    lock = FileLock(db.home.lock_path("queue"), role="queue", home=db.home.root)
    started = time.monotonic()
    lock.acquire(timeout)
    try:
        left = None if timeout is None else max(0.5, timeout - (time.monotonic() - started))
        with db.transaction(timeout=left) as conn:
            yield conn
    finally:
        lock.release()


# --- append ----------------------------------------------------------------------------------


def append(db: Store, kind: str, key: str, payload: str, *, at: float | None = None) -> int:
    """Validate, then in one transaction publish downtime evidence and insert the row.

    Returns the new row's sequence number. Rings the watcher's doorbell after the commit.
    """
    from firstmate import appendpath

    kind, key, payload = validate(kind, key, payload)
    seq = appendpath.commit(db.connection(), db.path, db.home.lock_path("queue"), db.home.root,
                            kind, key, payload, at=at)
    from firstmate import bell

    bell.ring(db.home)
    return seq


def append_locked(
    conn: sqlite3.Connection, kind: str, key: str, payload: str, *, at: float | None = None
) -> int:
    """:func:`append` for a caller already holding the queue lock and a transaction."""
    kind, key, payload = validate(kind, key, payload)
    return _insert(conn, kind, key, payload, at)


def _insert(conn: sqlite3.Connection, kind: str, key: str, payload: str, at: float | None) -> int:
    from firstmate import appendpath

    return appendpath.insert(conn, kind, key, payload, at)


# --- reading rows ----------------------------------------------------------------------------


@attrs.frozen
class _Bad:
    """An unusable row: its sequence and a one-line, TAB-separated quotation of its fields."""

    seq: int
    verbatim: str


Scanned = tuple[list[tuple[WakeRow, "str | None"]], list[_Bad]]


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


def _show(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return "NULL" if value is None else str(value)


def _quote(*fields: object) -> str:
    return "\t".join(clean(_show(v)) for v in fields)


_BLOBS = (
    "SELECT seq, at, CASE WHEN typeof(kind) = 'text' THEN CAST(kind AS BLOB) ELSE kind END,"
    " CASE WHEN typeof(key) = 'text' THEN CAST(key AS BLOB) ELSE key END,"
    " CASE WHEN typeof(payload) = 'text' THEN CAST(payload AS BLOB) ELSE payload END,"
    " typeof(kind), typeof(key), typeof(payload), claim FROM wakes"
)


def _parse(seq: object, at: object, kind: object, key: object, payload: object) -> WakeRow | None:
    if (
        isinstance(seq, int) and seq > 0
        and isinstance(at, int | float)
        and kind in KINDS
        and isinstance(key, str) and key.strip()
        and isinstance(payload, str)
    ):
        return WakeRow(seq, float(at), str(kind), key, payload)
    return None


def _scan(conn: sqlite3.Connection, where: str = "", params: Sequence[object] = ()) -> Scanned:
    """Rows in seq order: ``(row, claim)`` for usable rows, and the unusable ones quoted."""
    sql = f"SELECT seq, at, kind, key, payload, claim FROM wakes {('WHERE ' + where) if where else ''} ORDER BY seq"
    usable: list[tuple[WakeRow, str | None]] = []
    bad: list[_Bad] = []
    try:
        for seq, at, kind, key, payload, claim in conn.execute(sql, params):
            row = _parse(seq, at, kind, key, payload)
            if row is None:
                bad.append(_Bad(int(seq), _quote(at, seq, kind, key, payload)))
            else:
                usable.append((row, claim if claim in ACTORS else None))
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc).lower():
            raise
        return _scan_bytes(conn, where, params)  # some text is not UTF-8: the careful path
    return usable, bad


def _scan_bytes(conn: sqlite3.Connection, where: str, params: Sequence[object]) -> Scanned:
    sql = f"{_BLOBS} {('WHERE ' + where) if where else ''} ORDER BY seq"
    usable: list[tuple[WakeRow, str | None]] = []
    bad: list[_Bad] = []
    for seq, at, kind, key, payload, tkind, tkey, tpayload, claim in conn.execute(sql, params):
        fields = [kind if tkind == "text" else None, key if tkey == "text" else None,
                  payload if tpayload == "text" else None]
        row = _parse(seq, at, *(_text(f) for f in fields))
        if row is None:
            bad.append(_Bad(int(seq), _quote(at, seq, kind, key, payload)))
        else:
            usable.append((row, claim if claim in ACTORS else None))
    return usable, bad


def dedupe(rows: Iterable[WakeRow]) -> list[WakeRow]:
    """One row per (kind, key), in first-seen order, showing the last row; heartbeats collapse."""
    view: dict[tuple[str, str], WakeRow] = {}
    for row in rows:
        view[("heartbeat", "") if row.kind == "heartbeat" else (row.kind, row.key)] = row
    return list(view.values())


# --- unusable rows ---------------------------------------------------------------------------


def _retire(conn: sqlite3.Connection, bad: Sequence[_Bad], who: str) -> tuple[list[str], bool]:
    """Delete unusable rows, reporting them verbatim (first 20, then a count). Never raises.

    Returns the report lines and whether the rows are gone.
    """
    if not bad:
        return [], True
    try:
        conn.execute("SAVEPOINT retire")
        conn.executemany("DELETE FROM wakes WHERE seq = ?", [(r.seq,) for r in bad])
        now = time.time()
        conn.executemany(
            "INSERT INTO set_aside (at, what, record) VALUES (?, 'wake-row', ?)",
            [(now, r.verbatim) for r in bad[-SET_ASIDE_KEEP:]],
        )
        conn.execute(
            "DELETE FROM set_aside WHERE id <= (SELECT max(id) FROM set_aside) - ?",
            (SET_ASIDE_KEEP,),
        )
        # Their numbers were seen: never hand them out again.
        advance_seq(conn, max(r.seq for r in bad))
        conn.execute("RELEASE retire")
    except sqlite3.Error as exc:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK TO retire")
            conn.execute("RELEASE retire")
        return [
            f"{who}: {len(bad)} unusable queue row(s) could not be retired ({exc}); "
            "continuing with the rows that remain usable"
        ], False
    lines = [f"{who}: retired {len(bad)} unusable queue row(s) that could not be presented or acknowledged:"]
    lines += [f"{who}:   {r.verbatim}" for r in bad[:REPORT_SHOWN]]
    if len(bad) > REPORT_SHOWN:
        lines.append(f"{who}:   ... {len(bad) - REPORT_SHOWN} further unusable row(s) not shown")
    return lines, True


def retire_unusable(conn: sqlite3.Connection, who: str = "wake drain") -> list[str]:
    """Main only: retire every unusable row (SQL-invalid or undecodable); the report lines."""
    return _retire(conn, _scan(conn)[1], who)[0]


def _sql_unusable(conn: sqlite3.Connection) -> list[_Bad]:
    return _scan(conn, f"NOT {VALID_SQL}")[1]


# --- drain -----------------------------------------------------------------------------------


def _skip_line(exc: LockTimeout, bound: int) -> str:
    if exc.holder_pid:
        who = f"queue lock remains held by live pid {exc.holder_pid}"
    else:
        who = "queue lock remains held by another process"
    return f"WAKE DRAIN SKIPPED: {who} after {bound}s; retry on the next drain."


def drain(
    db: Store,
    actor: str | None = None,
    *,
    timeout: int | None = None,
    env: Mapping[str, str] | None = None,
) -> DrainResult:
    """Claim and present this actor's rows (see the module docstring and docs/cli.md).

    *timeout* bounds the queue-lock wait (default ``FM_STATUS_PRESENTATION_LOCK_TIMEOUT``); when
    it runs out the result carries only :attr:`DrainResult.skipped` and nothing changed.
    """
    actor = resolve_actor(actor, env)
    bound = lock_timeout(env) if timeout is None else timeout
    try:
        with locked(db, timeout=bound) as conn:
            result = drain_locked(conn, db, actor, env=env)
    except LockTimeout as exc:
        return DrainResult(actor=actor, skipped=_skip_line(exc, bound))
    return result


def drain_locked(
    conn: sqlite3.Connection, db: Store, actor: str, *, env: Mapping[str, str] | None = None
) -> DrainResult:
    from firstmate import grants

    notices: list[str] = []
    if actor == "main":
        gone = grants.reclaim_if_gone(conn)
        if gone is not None:
            notices.append(
                f"wake drain: reclaimed the supervision branch grant of gone pid {gone.owner_pid} "
                f"(generation {gone.generation}); its rows return to main"
            )
    else:
        _require_branch_grant(conn)
    usable, bad = _scan(conn)
    if actor == "main":
        report, retired = _retire(conn, bad, "wake drain")
        notices += report
        if any(c is None for _, c in usable):
            if not retired:
                # Unusable rows stayed: claim exactly the rows that were read as usable.
                conn.executemany("UPDATE wakes SET claim = 'main' WHERE seq = ?",
                                 [(r.seq,) for r, c in usable if c is None])
            else:
                conn.execute(f"UPDATE wakes SET claim = 'main' WHERE {_UNCLAIMED_SQL}")
        mine = [r for r, c in usable if c in (None, "main")]
    else:
        mine = [r for r, c in usable if c == "branch"]
        if not mine:
            _refuse_empty_grant(conn)
    suffix = _command_suffix(actor, env)
    if not usable:
        return _drain_episode_only(conn, actor, notices, suffix)
    if not mine:
        held = [r.seq for r, c in usable if c == "branch"]
        return DrainResult(actor=actor, notices=tuple(notices), held=grants.held_line(held))
    state = episodes.read(conn)
    if not isinstance(state, episodes.Episode) or state.status == "acked":
        state = episodes.publish_downtime(conn)
    episodes.begin_handling(conn)
    generation = state.generation
    through = max(r.seq for r in mine)
    return DrainResult(
        actor=actor,
        rows=tuple(dedupe(mine)),
        ack_through=through,
        generation=generation,
        ack_command=ack_command(through, generation, suffix),
        notices=tuple(notices),
    )


def _drain_episode_only(
    conn: sqlite3.Connection, actor: str, notices: list[str], suffix: str
) -> DrainResult:
    """No rows: an open episode still needs its generation-bound acknowledgement."""
    state = episodes.read(conn)
    if not isinstance(state, episodes.Episode) or not state.open:
        return DrainResult(actor=actor, notices=tuple(notices))
    if state.kind == "downtime":
        episodes.begin_handling(conn)
    return DrainResult(
        actor=actor, ack_through=0, generation=state.generation,
        ack_command=ack_command(0, state.generation, suffix), notices=tuple(notices),
    )


def _require_branch_grant(conn: sqlite3.Connection) -> None:
    from firstmate import grants

    grant = grants.read(conn)
    if grant is None:
        raise FirstmateError(
            "wake drain: the branch actor has no supervision grant; refusing to guess what this "
            "actor may consume (activate and publish a grant first, or drain as main)"
        )
    if grants.owner_state(grant) == "gone":
        raise FirstmateError(
            f"wake drain: the supervision branch grant's owner pid {grant.owner_pid} is gone "
            f"(generation {grant.generation}); main reclaims its rows on its next drain"
        )


def _refuse_empty_grant(conn: sqlite3.Connection) -> None:
    from firstmate import grants

    grant = grants.read(conn)
    assert grant is not None
    if grant.published:
        raise FirstmateError(
            f"wake drain: the supervision branch grant (generation {grant.generation}) holds no "
            "rows: its acknowledgement already consumed them; nothing to present"
        )
    raise FirstmateError(
        f"wake drain: the supervision branch grant (generation {grant.generation}) has no "
        "published rows; refusing to guess what this actor may consume"
    )


# --- acknowledge -----------------------------------------------------------------------------


def parse_through(value: str | int) -> int:
    through = decimal(str(value))
    if through is None:
        raise UsageError("wake drain: invalid acknowledgement sequence (expected a decimal number "
                         "below 2^63)")
    return through


def acknowledge(
    db: Store,
    actor: str | None,
    through: int | str,
    generation: str,
    *,
    env: Mapping[str, str] | None = None,
) -> AckResult:
    """Delete this actor's rows at or below *through*; retire the episode of *generation* when
    it is still the open one and no rows remain. Waits for the queue lock as long as it must."""
    actor = resolve_actor(actor, env)
    cutoff = parse_through(through)
    episodes.require_generation(generation)
    with locked(db) as conn:
        return acknowledge_locked(conn, actor, cutoff, generation, env=env)


def acknowledge_locked(
    conn: sqlite3.Connection,
    actor: str,
    cutoff: int,
    generation: str,
    *,
    env: Mapping[str, str] | None = None,
) -> AckResult:
    from firstmate import grants

    notices: list[str] = []
    if actor == "main":
        gone = grants.reclaim_if_gone(conn)
        if gone is not None:
            notices.append(
                f"wake drain: reclaimed the supervision branch grant of gone pid {gone.owner_pid} "
                f"(generation {gone.generation}); its rows return to main"
            )
        notices += _retire(conn, _sql_unusable(conn), "wake drain")[0]
    elif grants.read(conn) is None:
        raise FirstmateError(
            "wake drain: the branch actor has no supervision grant to acknowledge from; "
            "nothing was acknowledged"
        )
    row = conn.execute(
        f"SELECT coalesce(max(seq), 0) FROM wakes WHERE claim = ? AND {VALID_SQL}", (actor,)
    ).fetchone()
    presented_max = int(row[0])
    if actor == "main":
        # Claim every never-owned row at or below the cutoff so none is stranded; rows above it
        # stay unowned (a later grant may still take them). Rows a branch grant handed back are
        # not claimed here: main was never shown them, so only its next drain may take them.
        conn.execute(
            f"UPDATE wakes SET claim = 'main' WHERE claim IS NULL AND seq <= ? AND {VALID_SQL}",
            (cutoff,),
        )
    consumed = conn.execute(
        f"DELETE FROM wakes WHERE claim = ? AND seq <= ? AND {VALID_SQL}", (actor, cutoff)
    ).rowcount
    remaining = int(conn.execute("SELECT count(*) FROM wakes").fetchone()[0])
    state = episodes.read(conn)
    retired = moved = False
    open_elsewhere = (
        isinstance(state, episodes.Episode) and state.open and state.generation != generation
    )
    if remaining == 0 and isinstance(state, episodes.Episode | episodes.Invalid):
        retired = episodes.acknowledge(conn, generation) is not episodes.Ack.MISMATCH
        moved = not retired and (open_elsewhere or isinstance(state, episodes.Invalid))
    else:
        moved = open_elsewhere
    suffix = _command_suffix(actor, env)
    state = episodes.read(conn)
    if consumed == 0 and presented_max > cutoff:
        head = (
            f"wake drain: nothing was acknowledged through {cutoff} (none of your presented wake"
            f" rows is at or below it); the current wake is row {presented_max}: "
        )
        if isinstance(state, episodes.Episode) and state.open:
            notices.append(head + f"run {ack_command(presented_max, state.generation, suffix)} after handling it")
        else:
            notices.append(head + f"re-run fm wake drain{suffix} and use the WAKE_ACK_REQUIRED command it prints")
    elif not retired and not moved and remaining == 0 and isinstance(state, episodes.Episode) \
            and state.generation != generation:
        notices.append(
            f"wake drain: recovery generation {generation} is not the current episode "
            f"({state.token()}); nothing more to retire"
        )
    elif moved:
        notices.append(
            f"wake drain: acknowledged wakes through {cutoff} ({consumed} row(s) consumed), but a "
            f"newer recovery episode is pending; re-run fm wake drain{suffix} and use the new "
            "WAKE_ACK_REQUIRED command"
        )
    return AckResult(actor=actor, through=cutoff, generation=generation, consumed=consumed,
                     retired=retired, moved=moved, notices=tuple(notices))


# --- queries (read-only; call inside Store.reading() or a transaction) ----------------------


def depth(conn: sqlite3.Connection, through: int | None = None) -> int:
    """Every queued row, usable or not (only those with a sequence up to *through* if given)."""
    if through is None:
        return int(conn.execute("SELECT count(*) FROM wakes").fetchone()[0])
    return int(conn.execute("SELECT count(*) FROM wakes WHERE seq <= ?", (through,)).fetchone()[0])


def unusable_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute(f"SELECT count(*) FROM wakes WHERE NOT {VALID_SQL}").fetchone()[0])


def oldest(conn: sqlite3.Connection) -> WakeRow | None:
    usable, _ = _scan(conn, f"{VALID_SQL} AND seq = (SELECT min(seq) FROM wakes WHERE {VALID_SQL})")
    return usable[0][0] if usable else None


def rows_after(conn: sqlite3.Connection, seq: int) -> list[WakeRow]:
    """Usable rows with a sequence above *seq*, ascending (for a watcher following appends)."""
    return [row for row, _ in _scan(conn, "seq > ?", (int(seq),))[0]]


def pending_count(conn: sqlite3.Connection, actor: str) -> int:
    """Rows *actor* could itself present or retire.

    branch: the rows in the live grant. main: every row not reserved by a live grant, unusable
    rows included (a main drain retires those).
    """
    from firstmate import grants

    live = grants.live_grant(conn) is not None
    if actor == "branch":
        if not live:
            return 0
        return int(conn.execute(
            f"SELECT count(*) FROM wakes WHERE claim = 'branch' AND {VALID_SQL}").fetchone()[0])
    if live:
        return int(conn.execute(
            f"SELECT count(*) FROM wakes WHERE NOT (coalesce(claim, '') = 'branch' AND {VALID_SQL})"
        ).fetchone()[0])
    return depth(conn)


@attrs.frozen
class QueueStatus:
    depth: int
    last_seq: int
    oldest: WakeRow | None
    pending_main: int
    pending_branch: int
    unusable: int
    episode: episodes.EpisodeState
    grant: dict[str, object] | None

    def to_json(self) -> dict[str, object]:
        state = self.episode
        return {
            "depth": self.depth, "last_seq": self.last_seq,
            "oldest": None if self.oldest is None else self.oldest.to_json(),
            "pending": {"main": self.pending_main, "branch": self.pending_branch},
            "unusable": self.unusable,
            "episode": state.token() if isinstance(state, episodes.Episode) else None,
            "episode_state": ("valid" if isinstance(state, episodes.Episode)
                              else "invalid" if isinstance(state, episodes.Invalid) else "missing"),
            "grant": self.grant,
        }


def query(db: Store) -> QueueStatus:
    """A consistent read-only snapshot for `fm wake query` and `fm status`."""
    from firstmate import grants

    with db.reading() as conn:
        grant = grants.read(conn)
        info: dict[str, object] | None = None
        if grant is not None:
            info = {**grant.to_json(), "owner": grants.owner_state(grant),
                    "rows": grants.reserved(conn)}
        return QueueStatus(
            depth=depth(conn), last_seq=last_seq(conn), oldest=oldest(conn),
            pending_main=pending_count(conn, "main"), pending_branch=pending_count(conn, "branch"),
            unusable=unusable_count(conn), episode=episodes.read(conn), grant=info,
        )


__all__ = [
    "ACTORS",
    "KEY_MAX",
    "KINDS",
    "PAYLOAD_MAX",
    "TRUNCATION_MARKER",
    "VALID_SQL",
    "AckResult",
    "DrainResult",
    "QueueStatus",
    "WakeRow",
    "ack_command",
    "acknowledge",
    "acknowledge_locked",
    "append",
    "append_locked",
    "clean",
    "dedupe",
    "depth",
    "drain",
    "drain_locked",
    "lock_timeout",
    "locked",
    "oldest",
    "pending_count",
    "query",
    "resolve_actor",
    "retire_unusable",
    "rows_after",
    "unusable_count",
    "validate",
]
