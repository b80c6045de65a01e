"""Who consumes the wake queue and how its commands are spelled, as plain functions.

The attrs-free core shared by :mod:`firstmate.store.queue` / :mod:`firstmate.store.drain` and
the ``fm wake drain`` fast path (:mod:`firstmate.fast.drainpath`): the SQL predicates for a
usable and an unclaimed row, the actor an environment names, the bounded wait of a drain, and
the acknowledgement command a drain prints.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

ACTORS = ("main", "branch")
ACTOR_ENV = "FM_SUPERVISION_ACTOR"
LOCK_TIMEOUT_ENV = "FM_STATUS_PRESENTATION_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 10

#: SQL predicate for a row that can be claimed, presented and acknowledged. (Text that is not
#: valid UTF-8 passes this and is caught when the row is decoded for presentation.)
VALID_SQL = (
    "(seq > 0 AND typeof(at) IN ('integer', 'real')"
    " AND typeof(kind) = 'text' AND kind IN ('signal', 'stale', 'check', 'heartbeat')"
    " AND typeof(key) = 'text' AND length(trim(key)) > 0 AND typeof(payload) = 'text')"
)
UNCLAIMED_SQL = "(claim IS NULL OR claim NOT IN ('main', 'branch'))"


def resolve_actor(actor: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """*actor*, else ``FM_SUPERVISION_ACTOR``, else ``main``; anything else is a UsageError."""
    if actor is None:
        env = os.environ if env is None else env
        value = env.get(ACTOR_ENV, "").strip() or "main"
        if value not in ACTORS:
            raise _unknown(f"unknown {ACTOR_ENV}", value)
        return value
    if actor not in ACTORS:
        raise _unknown("unknown supervision actor", actor)
    return actor


def _unknown(what: str, value: str) -> Exception:
    from firstmate.base.errors import UsageError
    from firstmate.base.wakeinput import clean

    return UsageError(f"{what} {clean(value)[:40]!r} (expected main or branch)")


#: What only the captain does with the queue: a crew's session is refused (firstmate.cli.main).
CAPTAIN_ONLY = "drains and acknowledges the wake queue"


def refuse_crew(env: Mapping[str, str] | None = None) -> None:
    """A crew's session (``FM_CREW``, ``FM_TASK_ID``) never takes the primary's wakes, on either
    drain path: one line, exit 1 (:func:`firstmate.base.quickgate.refuse_crew_session`)."""
    env = os.environ if env is None else env
    if env.get("FM_CREW") or env.get("FM_TASK_ID"):  # (the gate's module only when it may say no)
        from firstmate.base.quickgate import refuse_crew_session

        refuse_crew_session(env, "wake drain", CAPTAIN_ONLY)


def lock_timeout(env: Mapping[str, str] | None = None) -> int:
    """``FM_STATUS_PRESENTATION_LOCK_TIMEOUT``: a positive integer of seconds, junk → 10."""
    raw = (os.environ if env is None else env).get(LOCK_TIMEOUT_ENV, "").strip()
    if raw.isascii() and raw.isdigit() and int(raw) > 0:
        return int(raw)
    return DEFAULT_LOCK_TIMEOUT


def command_suffix(actor: str, env: Mapping[str, str] | None) -> str:
    # The printed command must act as the same actor: a branch that chose its actor with
    # --actor (not through its environment) gets the flag spelled out.
    if actor == "main":
        return ""
    env = os.environ if env is None else env
    return "" if env.get(ACTOR_ENV, "").strip() == "branch" else " --actor branch"


def ack_command(through: int, generation: str, suffix: str = "") -> str:
    return f"fm wake drain --ack-through {through} --recovery-generation {generation}{suffix}"


def ack_required(command: str | None) -> str | None:
    """The WAKE_ACK_REQUIRED line for *command* (None: nothing to acknowledge)."""
    if command is None:
        return None
    return f"WAKE_ACK_REQUIRED: after handling completes run {command}"


def skip_line(holder_pid: int | None, bound: int) -> str:
    """The WAKE DRAIN SKIPPED line: the queue lock stayed held for the whole bounded wait."""
    if holder_pid:
        who = f"queue lock remains held by live pid {holder_pid}"
    else:
        who = "queue lock remains held by another process"
    return f"WAKE DRAIN SKIPPED: {who} after {bound}s; retry on the next drain."


__all__ = ["ACTORS", "ACTOR_ENV", "CAPTAIN_ONLY", "DEFAULT_LOCK_TIMEOUT", "LOCK_TIMEOUT_ENV",
           "UNCLAIMED_SQL", "VALID_SQL", "ack_command", "ack_required", "command_suffix",
           "lock_timeout", "refuse_crew", "resolve_actor", "skip_line"]
