"""The recovery episode: one generation of "the fleet was not being watched" (or "a wake is being
handled"), announced at most once and retired only by a generation-bound acknowledgement.

The episode is one row of the ``episode`` table, read as ``status:kind:generation``:

* status ∈ ``pending`` (recovery owed), ``announced`` (a watcher start surfaced it), ``acked``
  (retired by the acknowledgement the drain printed);
* kind ∈ ``downtime`` (nothing was watching) or ``handling`` (a delivered wake is being handled);
* generation matches ``[A-Za-z0-9._-]+``, minted as ``<pid>.<epoch>.<random>``.

Besides a valid :class:`Episode` the row can be :data:`MISSING` (never written) or
:class:`Invalid` (damaged or hand-edited). An invalid row is never trusted: the transition that
meets it first keeps the bad record in ``set_aside`` and starts a fresh generation.

The row itself and the transitions appends, drains and acknowledgements make are plain
functions in :mod:`firstmate.fast.episoderow` (the ``fm wake append`` and ``fm wake drain`` fast
paths use them without attrs); this module wraps them in value classes.

Every function here takes a connection that is already inside a write transaction
(:meth:`firstmate.store.database.Store.transaction`); callers that also touch the queue hold the queue
lock as well, so the queue and the episode always move together.

Transitions (beyond the original table, the newest documented rules apply):

====================  ==========================  ======================================
operation             from                        to / result
====================  ==========================  ======================================
publish_downtime      pending:*:G                 pending:downtime:G (generation reused)
                      announced:downtime:G        unchanged for a watcher close;
                                                  pending:downtime:<new> for an append
                      announced:handling:G        pending:downtime:G (handling may have been
                                                  interrupted; the printed ack stays valid)
                      acked / missing / invalid   pending:downtime:<new>
publish_handling      anything                    pending:handling:<new>
begin_handling(G?)    pending:downtime:G          pending:handling:G            STARTED
                      announced:downtime:G        announced:handling:G          STARTED
                      *:handling:G                unchanged                     UNCHANGED
                      acked:*:G, G named          unchanged (a no-op confirm)   ALREADY_ACKED
                      other generation named      unchanged                     MISMATCH
                      acked, missing, invalid     unchanged                     UNUSABLE
acknowledge(G)        pending|announced:K:G       acked:K:G                     ACKED
                      acked:*:G                   unchanged                     ALREADY_ACKED
                      anything else               unchanged                     MISMATCH
arm_check(queued)     missing                     queued: announced:downtime:<new> → RECOVER;
                                                  empty: NONE
                      invalid                     set aside, announced:downtime:<new> → RECOVER
                      pending:downtime:G          announced:downtime:G → RECOVER
                      *:handling, announced:*     unchanged → WAIT
                      acked                       queued: announced:downtime:<new> → RECOVER;
                                                  empty: NONE
reopen_announced      announced:*:G with a row    pending:downtime:<new>
                      queued after announcement
                      announced, nothing newer    unchanged (repeated empty arms idempotent)
====================  ==========================  ======================================
"""

from __future__ import annotations

import enum
import re
import sqlite3

import attrs

from firstmate.base.errors import UsageError
from firstmate.fast import episoderow
from firstmate.fast.episoderow import GENERATION_MAX, KINDS, STATUSES
from firstmate.store import database as store

GENERATION_RE = re.compile(r"[A-Za-z0-9._-]+")


@attrs.frozen
class Episode:
    status: str
    kind: str
    generation: str

    def token(self) -> str:
        return f"{self.status}:{self.kind}:{self.generation}"

    @property
    def open(self) -> bool:
        """Pending or announced: an acknowledgement is still owed."""
        return self.status != "acked"


@attrs.frozen
class Missing:
    """No episode has ever been recorded in this home."""

    def token(self) -> None:
        return None


@attrs.frozen
class Invalid:
    """The stored row is not a valid episode; *record* is what it held, verbatim."""

    record: str

    def token(self) -> None:
        return None


MISSING = Missing()
EpisodeState = Episode | Missing | Invalid


class Handling(enum.Enum):
    STARTED = "started"
    UNCHANGED = "unchanged"
    ALREADY_ACKED = "already-acked"
    MISMATCH = "mismatch"
    UNUSABLE = "unusable"

    @property
    def exit_code(self) -> int:
        """The status a `--handling-delivered` confirmation exits with for this outcome."""
        return {"mismatch": 3, "unusable": 1}.get(self.value, 0)


class Ack(enum.Enum):
    ACKED = "acked"
    ALREADY_ACKED = "already-acked"
    MISMATCH = "mismatch"


class Action(enum.Enum):
    NONE = "none"
    RECOVER = "recover"
    WAIT = "wait"


def valid_generation(value: object) -> bool:
    return episoderow.valid_generation(value)


def require_generation(value: str) -> str:
    """*value* if it is a well-formed generation, else :class:`UsageError` (exit 2)."""
    if not value:
        raise UsageError("acknowledgement requires its recovery generation")
    if not valid_generation(value):
        raise UsageError(f"invalid recovery generation {value[:80]!r} (expected [A-Za-z0-9._-]+)")
    return value


def new_generation() -> str:
    return episoderow.new_generation()


def parse_token(token: str) -> Episode | None:
    """The episode a ``status:kind:generation`` token names, or None when it is malformed."""
    parts = token.strip().split(":")
    if len(parts) != 3:
        return None
    status, kind, generation = parts
    if status in STATUSES and kind in KINDS and valid_generation(generation):
        return Episode(status, kind, generation)
    return None


# --- reading and writing ---------------------------------------------------------------------


def read(conn: sqlite3.Connection) -> EpisodeState:
    return _state(episoderow.read(conn))


def _state(state: episoderow.State) -> EpisodeState:
    if state is None:
        return MISSING
    if isinstance(state, str):
        return Invalid(state)
    return Episode(*state)


def plain(state: EpisodeState) -> episoderow.State:
    """*state* as :mod:`firstmate.fast.episoderow`'s plain value."""
    if isinstance(state, Episode):
        return state.status, state.kind, state.generation
    return state.record if isinstance(state, Invalid) else None


def _announced_seq(conn: sqlite3.Connection) -> int | None:
    return episoderow.announced_seq(conn)


def _write(conn: sqlite3.Connection, episode: Episode, *, announced_seq: int | None = None) -> Episode:
    episoderow.write(conn, episode.status, episode.kind, episode.generation,
                     announced_seq=announced_seq)
    return episode


def _fresh(conn: sqlite3.Connection, status: str, kind: str, state: EpisodeState) -> Episode:
    return Episode(*episoderow.fresh(conn, status, kind, plain(state)))


# --- transitions -----------------------------------------------------------------------------


def publish_downtime(conn: sqlite3.Connection, *, append: bool = False) -> Episode:
    """Record that the fleet may have gone unwatched (a watcher close, or *append* of a row)."""
    return Episode(*episoderow.publish_downtime(conn, append=append))


def publish_handling(conn: sqlite3.Connection) -> Episode:
    """Start a fresh handling episode (a wake is about to be delivered to the model)."""
    return _fresh(conn, "pending", "handling", read(conn))


def begin_handling(conn: sqlite3.Connection, expected: str | None = None) -> Handling:
    """Move a downtime episode to handling (drain presentation, `--handling-delivered GEN`)."""
    return Handling(episoderow.begin_handling(conn, expected))


def acknowledge(conn: sqlite3.Connection, generation: str) -> Ack:
    """Retire the episode of *generation* (the generation-bound half of an acknowledgement)."""
    require_generation(generation)
    return Ack(episoderow.acknowledge(conn, generation))


def arm_check(conn: sqlite3.Connection, queue_nonempty: bool) -> Action:
    """What a (non-successor) watcher start owes: announce once and recover, wait, or nothing."""
    state = read(conn)
    if isinstance(state, Invalid):
        _fresh(conn, "announced", "downtime", state)
        return Action.RECOVER
    if isinstance(state, Missing) or state.status == "acked":
        if not queue_nonempty:
            return Action.NONE
        _fresh(conn, "announced", "downtime", state)
        return Action.RECOVER
    if state.status == "pending" and state.kind == "downtime":
        _write(conn, Episode("announced", "downtime", state.generation))
        return Action.RECOVER
    return Action.WAIT


def reopen_announced(conn: sqlite3.Connection, through: int | None = None) -> EpisodeState:
    """At a non-successor watcher start: reopen an announced episode only for newer rows.

    An announced generation stays announced while nothing was queued after its announcement
    (repeated empty-queue arms are idempotent); a row queued after it opens a fresh pending
    downtime generation, so that buried work resurfaces exactly once. Rows above *through* (the
    watcher's startup safe point) arrived while it was live: they are not buried work.
    """
    state = read(conn)
    if not isinstance(state, Episode) or state.status != "announced":
        return state
    since = _announced_seq(conn)
    newest = store.max_queued_seq(conn)
    if through is not None:
        newest = min(newest, through)
    if newest == 0 or (since is not None and newest <= since):
        return state
    return _fresh(conn, "pending", "downtime", state)


__all__ = [
    "GENERATION_MAX",
    "GENERATION_RE",
    "KINDS",
    "MISSING",
    "STATUSES",
    "Ack",
    "Action",
    "Episode",
    "EpisodeState",
    "Handling",
    "Invalid",
    "Missing",
    "acknowledge",
    "arm_check",
    "begin_handling",
    "new_generation",
    "parse_token",
    "plain",
    "publish_downtime",
    "publish_handling",
    "read",
    "reopen_announced",
    "require_generation",
    "valid_generation",
]
