"""The primary session lock: which harness session is the one primary for a home.

The lock is held on behalf of a *harness process* (the Claude Code, Codex, Pi… process), not the
short-lived ``fm`` process that takes it, so it cannot be a kernel lock held open: it is a durable
owner record, ``state/session.lock``, validated by process identity whenever it is read. A
:class:`~firstmate.store.locks.FileLock` (``state/session-acquire.lock``) only serialises the writers.

Two verdicts decide everything, each a function of a record plus live process facts:

* :func:`blocks_reclaim` - does the recorded owner still stand in a new session's way?
* :func:`owned_by_self` - does the record belong to the calling process's own session?

Holder resolution walks the caller's ancestry with psutil only (no ``ps`` binary needed); see
:func:`resolve_holder` for the rules, and ``docs/state.md`` for the user-facing description.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Literal

import attrs

from firstmate.base import proctoken
from firstmate.base.errors import StateError, UsageError
from firstmate.base.quickgate import refuse_crew_session
from firstmate.continuity import sessionmemo
from firstmate.continuity.sessionrecord import (
    SESSION_ID,
    HarnessNotFound,
    RecordRead,
    SessionLockError,
    SessionLockHeld,
    SessionRecord,
    read_record,
    record_path,
)
from firstmate.plugin.harnessprocs import harness_of, harness_table
from firstmate.store.home import Home, atomic_write
from firstmate.store.identity import (
    DEFAULT_MAX_HOPS,
    ProcessIdentity,
    ProcInfo,
    ancestry,
    identity_of,
    is_alive,
    proc_info,
)
from firstmate.store.locks import FileLock

ACQUIRE_LOCK_NAME = "session-acquire"
#: How long an acquire or release waits for another ``fm lock`` that is mid-write.
ACQUIRE_WAIT = 10.0

HOLDER_PID_ENV = "FM_SESSION_HOLDER_PID"

LockState = Literal["free", "held", "stale", "unreadable", "unknown"]
#: What the live system says about a record's owner (see :func:`classify`).
OwnerStatus = Literal["zero", "dead", "unsignalable", "reused", "unverifiable", "not-harness",
                      "live"]
_BLOCKING: frozenset[str] = frozenset({"live", "unverifiable"})


# --- live facts and the two verdicts ----------------------------------------------------------


@attrs.frozen
class LiveFacts:
    """What the system says right now about the process at one pid."""

    alive: bool
    #: False when the process exists but this user may not signal it (another user's process).
    signalable: bool = True
    #: The live identity; None when it cannot be read (or the process is gone).
    identity: ProcessIdentity | None = None
    #: The harness the live process runs as (None: not recognisably one), when *checked*.
    harness: str | None = None
    harness_checked: bool = False


DEAD = LiveFacts(alive=False, signalable=False)


def probe(pid: int, harness: str = "") -> LiveFacts:
    """Gather :class:`LiveFacts` for *pid* (psutil and ``kill(pid, 0)``; no ``ps`` binary).
    With *harness* (a record's, not ``unknown``) it also checks the process still runs as that
    harness, asking only that harness's plugin."""
    if pid <= 0 or not is_alive(pid):
        return DEAD
    signalable = True
    if os.name == "posix":  # elsewhere signal 0 is not a probe
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return DEAD
        except PermissionError:
            signalable = False
    ident = identity_of(pid)
    if ident is None and not is_alive(pid):
        return DEAD
    if harness in ("", "unknown"):
        return LiveFacts(alive=True, signalable=signalable, identity=ident)
    info = proc_info(pid)
    runs_as = (harness_of(info, table=harness_table(only=harness)) if info is not None
               else None)
    return LiveFacts(alive=True, signalable=signalable, identity=ident, harness=runs_as,
                     harness_checked=True)


def same_process(recorded: ProcessIdentity, live: ProcessIdentity) -> bool:
    """True when *live* is the process *recorded* names.

    Pid and start time decide: a new process on a reused pid cannot share the start time of one
    that had to exit first. The command-line hash is not compared, because a harness may retitle
    itself (node's ``process.title``) after the record was written, and that must not hand its
    lock to another session.
    """
    return recorded.pid == live.pid and proctoken.close_starts(recorded.started, live.started)


def classify(record: SessionRecord, facts: LiveFacts) -> OwnerStatus:
    """The state of *record*'s owner given *facts* about its pid (pure)."""
    recorded = record.process
    if record.pid <= 0 or recorded is None:
        return "zero"
    if not facts.alive:
        return "dead"
    if not facts.signalable:
        return "unsignalable"
    if facts.identity is None:
        return "unverifiable"
    if not same_process(recorded, facts.identity):
        return "reused"
    if (facts.harness_checked and record.harness not in ("", "unknown")
            and facts.harness != record.harness):
        # The same process (pid and start time), but no longer the harness that took the
        # lock: it exec'd into something else, so no session of that harness is left to hold it.
        return "not-harness"
    return "live"


def blocks_reclaim(record: SessionRecord, facts: LiveFacts | None = None) -> bool:
    """True when *record*'s owner keeps a new session (and any recovery) away from the lock.

    An all-zero, proven-dead, reused or live-but-unsignalable owner is reclaimable. A verified
    live holder blocks, and so does a live owner whose identity cannot be read: it may well be
    the holder, so nobody may take its lock. *facts* default to a fresh :func:`probe`.
    """
    if facts is None:
        facts = probe(record.pid, record.harness)
    return classify(record, facts) in _BLOCKING


@attrs.frozen
class TrustedSession:
    """A session id vouched for by a harness's session anchor (HarnessInfo.session_anchor):
    its pid variable names that harness's process above us."""

    session_id: str
    harness_pid: int
    harness: str


def trusted_session(
    env: Mapping[str, str] | None = None, chain: Sequence[ProcInfo] | None = None
) -> TrustedSession | None:
    """The trusted session of the caller, or None.

    *chain* is the caller's ancestry, innermost (the caller itself) first; it defaults to this
    process's. Trusted means an installed harness plugin's session anchor is set: its session
    variable holds a plausible id and its pid variable names that harness's own process in the
    caller's ancestry; a session id alone proves nothing.
    """
    env = os.environ if env is None else env
    anchors = [a for a in harness_table(env).anchors if env.get(a[2], "").strip()]
    if not anchors:
        return None
    chain = _chain(chain)
    for harness, pid_env, session_env in anchors:
        session_id = env.get(session_env, "").strip()
        raw_pid = env.get(pid_env, "").strip()
        if not SESSION_ID.fullmatch(session_id) or not (raw_pid.isascii() and raw_pid.isdigit()):
            continue
        pid = int(raw_pid)
        found = next((info for info in chain[1:] if info.pid == pid), None)
        if found is not None and harness_of(found, env) == harness:
            return TrustedSession(session_id=session_id, harness_pid=pid, harness=harness)
    return None


def owned_by_self(
    record: SessionRecord,
    *,
    env: Mapping[str, str] | None = None,
    chain: Sequence[ProcInfo] | None = None,
    facts: LiveFacts | None = None,
) -> bool:
    """True when *record* belongs to the calling process's own session.

    Either the recorded process is one of the caller's ancestors (same pid and start time), or
    the caller runs under a trusted session (a harness's session anchor) whose id the record
    carries and the recorded
    holder is a verified live process (so a session keeps its lock after its helper chain is
    recycled). *chain* defaults to this process's ancestry; *facts* to a probe of the record.
    """
    recorded = record.process
    if recorded is None:
        return False
    chain = _chain(chain)
    if any(info.pid == record.pid for info in chain):
        live = facts.identity if facts is not None else identity_of(record.pid)
        if live is not None and same_process(recorded, live):
            return True
    trusted = trusted_session(env, chain)
    if trusted is None or record.session_id != trusted.session_id:
        return False
    return classify(record, probe(record.pid, record.harness) if facts is None else facts) == "live"


def _chain(chain: Sequence[ProcInfo] | None) -> Sequence[ProcInfo]:
    return ancestry(os.getpid(), DEFAULT_MAX_HOPS) if chain is None else chain


# --- inspection ------------------------------------------------------------------------------


@attrs.frozen
class LockInspection:
    """The session lock as a reader sees it.

    ``free``: no record. ``held``: a verified live holder. ``stale``: the owner is gone, reused,
    another user's, or the record is all-zero (reclaimable). ``unreadable``: empty, malformed,
    symlinked or not a regular file (not an identity; a later acquire replaces it).
    ``unknown``: the owner is alive but its identity cannot be read (treated as held).
    """

    state: LockState
    record: SessionRecord | None = None
    pid: int | None = None
    owner: OwnerStatus | None = None
    detail: str = ""

    @property
    def recoverable(self) -> bool:
        """True only for a stale record: an absent or unusable record gives recovery nothing."""
        return self.state == "stale"

    @property
    def line(self) -> str:
        if self.state == "held":
            return f"lock: held by live harness pid {self.pid}"
        if self.state == "stale":
            return f"lock: stale (pid {self.pid} dead or not a harness)"
        if self.state == "unknown":
            return f"lock: unknown (pid {self.pid} is alive but its identity cannot be read)"
        return f"lock: {self.state}"

    def to_dict(self) -> dict[str, object]:
        return {
            "state": self.state, "line": self.line, "pid": self.pid, "owner": self.owner,
            "recoverable": self.recoverable, "detail": self.detail,
            "record": self.record.to_dict() if self.record is not None else None,
        }


def inspect(home: Home, facts: LiveFacts | None = None) -> LockInspection:
    """The state of *home*'s session lock. Never raises for a bad record; reads only."""
    found = read_record(home)
    if found.kind == "absent":
        return LockInspection("free")
    record = found.record
    if record is None:
        return LockInspection("unreadable", pid=found.pid, detail=found.detail)
    owner = classify(record, probe(record.pid, record.harness) if facts is None else facts)
    state: LockState = (
        "held" if owner == "live" else "unknown" if owner == "unverifiable" else "stale"
    )
    return LockInspection(state, record=record, pid=record.pid, owner=owner, detail=owner)


# --- the holder --------------------------------------------------------------------------------


HolderVia = Literal["walk", "trusted-session", "override"]


@attrs.frozen
class Holder:
    """The process the lock is taken for, and the processes that count as the same session."""

    identity: ProcessIdentity
    harness: str
    via: HolderVia
    session_id: str | None = None
    #: The contiguous run of same-harness processes around the holder (a launcher and the
    #: process it runs are one session).
    run_pids: tuple[int, ...] = ()

    @property
    def pid(self) -> int:
        return self.identity.pid


def resolve_holder(
    env: Mapping[str, str] | None = None, chain: Sequence[ProcInfo] | None = None
) -> Holder:
    """The process the calling ``fm`` takes the session lock for.

    1. ``FM_SESSION_HOLDER_PID`` (for in-process shims and tests): must name a process above the
       caller (not itself, not pid 1); it need not be recognisable as a harness.
    2. A trusted session (see :func:`trusted_session`): the harness pid its anchor names.
    3. Otherwise the innermost harness process above the caller, widened to the outermost process
       of the contiguous run of processes of that same harness (a wrapper and the harness it runs,
       or a harness and a transient helper copy of itself, are one session; the outermost lives
       longest).

    Raises :class:`HarnessNotFound` when none exists, :class:`UsageError` for a bad override.
    """
    env = os.environ if env is None else env
    chain = _chain(chain)
    trusted = trusted_session(env, chain)
    raw = env.get(HOLDER_PID_ENV, "").strip()
    if raw:
        index = _override_index(raw, chain)
        named = harness_of(chain[index], env) or "unknown"
        session = trusted.session_id if trusted and trusted.harness_pid == chain[index].pid else None
        return _holder(chain, index, named, "override", session, env)
    if trusted is not None:
        index = next(i for i, info in enumerate(chain) if info.pid == trusted.harness_pid)
        return _holder(chain, index, trusted.harness, "trusted-session", trusted.session_id, env)
    for index, info in enumerate(chain):
        name = harness_of(info, env)
        if name is None:
            continue
        while index + 1 < len(chain) and harness_of(chain[index + 1], env) == name:
            index += 1
        return _holder(chain, index, name, "walk", None, env)
    raise HarnessNotFound("cannot locate harness process in ancestry; run fm lock acquire from "
                          f"inside the harness session, or set {HOLDER_PID_ENV} to its pid")


def _override_index(raw: str, chain: Sequence[ProcInfo]) -> int:
    pid = int(raw) if raw.isascii() and raw.isdigit() else 0
    for index, info in enumerate(chain):
        if index > 0 and info.pid == pid and pid > 1:
            return index
    raise UsageError(
        f"{HOLDER_PID_ENV}={raw!r} does not name a process above this fm; "
        "set it to the harness pid that started fm, or unset it"
    )


def _holder(
    chain: Sequence[ProcInfo], index: int, name: str, via: HolderVia, session: str | None,
    env: Mapping[str, str],
) -> Holder:
    info = chain[index]
    ident = identity_of(info.pid)
    if ident is None:
        raise SessionLockError(
            f"cannot read the identity of harness pid {info.pid}; operate read-only and retry "
            "fm lock acquire"
        )
    lo = hi = index
    if name != "unknown":
        while lo > 0 and harness_of(chain[lo - 1], env) == name:
            lo -= 1
        while hi + 1 < len(chain) and harness_of(chain[hi + 1], env) == name:
            hi += 1
    run = tuple(chain[i].pid for i in range(lo, hi + 1))
    return Holder(identity=ident, harness=name, via=via, session_id=session, run_pids=run)


# --- acquire, release, recheck ---------------------------------------------------------------


@attrs.frozen
class AcquireResult:
    holder: Holder
    record: SessionRecord
    #: The record that was there before (None when the lock was free or unreadable).
    previous: SessionRecord | None
    #: ``kept`` (already this session's), ``written`` (was free, or this session's and took up a
    #: trusted session id), ``reclaimed`` (was stale), ``replaced`` (was unreadable).
    outcome: Literal["kept", "written", "reclaimed", "replaced"]

    @property
    def line(self) -> str:
        return f"lock acquired: harness pid {self.record.pid}"


def _acquire_lock(home: Home) -> FileLock:
    return FileLock(path=home.lock_path(ACQUIRE_LOCK_NAME), role=ACQUIRE_LOCK_NAME,
                    home=home.root, timeout=ACQUIRE_WAIT)


def _refuse_unsafe(found: RecordRead) -> None:
    if found.kind == "symlink":
        raise StateError(
            f"refusing symlinked state path {found.path}: remove the link and let fm recreate it"
        )
    if found.kind == "not-regular":
        raise StateError(
            f"session lock {found.path} is not a regular file; move it aside and retry"
        )


def acquire(
    home: Home, env: Mapping[str, str] | None = None, chain: Sequence[ProcInfo] | None = None
) -> AcquireResult:
    """Take the session lock for the caller's harness (see :func:`resolve_holder`).

    Raises :class:`SessionLockHeld` when another live session owns it, :class:`HarnessNotFound`
    when there is no harness to hold it, :class:`StateError` for a symlinked or non-regular
    record, and :class:`SessionLockError` when the written record does not read back. In a
    crew's session (``FM_CREW``, ``FM_TASK_ID``) it takes nothing, whoever asks (``fm lock
    acquire``, a bridge, a hook): a :class:`~firstmate.base.errors.FirstmateError`, exit 1.
    """
    refuse_crew_session(os.environ if env is None else env, "lock acquire",
                        "holds the primary session lock")
    holder = resolve_holder(env, chain)
    found = read_record(home)
    _refuse_unsafe(found)
    _refuse_live_other(holder, found.record)  # fail fast, before queueing for the writer lock
    home.check_ground()
    with _acquire_lock(home):
        found = read_record(home)
        _refuse_unsafe(found)
        previous = found.record
        _refuse_live_other(holder, previous)
        if previous is not None and _same_holder(holder, previous):
            # Already this session's: keep the recorded process (the run's processes live and
            # die together) and only take up a newly trusted session id.
            session_id = holder.session_id or previous.session_id
            if session_id == previous.session_id:
                return _remembered(home, AcquireResult(holder, previous, previous, "kept"))
            record = attrs.evolve(previous, session_id=session_id)
            _write(home, record)
            return _remembered(home, AcquireResult(holder, record, previous, "written"))
        outcome: Literal["written", "reclaimed", "replaced"] = (
            "reclaimed" if previous is not None
            else "replaced" if found.kind != "absent" else "written"
        )
        record = SessionRecord(pid=holder.pid, identity=holder.identity.token(),
                               harness=holder.harness, acquired_at=time.time(),
                               session_id=holder.session_id)
        _write(home, record)
        return _remembered(home, AcquireResult(holder, record, previous, outcome))


def _remembered(home: Home, result: AcquireResult) -> AcquireResult:
    sessionmemo.remember(home, result.record, _live_as_named)
    return result


def _live_as_named(record: SessionRecord) -> bool:
    facts = probe(record.pid, record.harness)
    return facts.harness_checked and classify(record, facts) == "live"


def _same_holder(holder: Holder, record: SessionRecord) -> bool:
    """True when *record* names the holder or another process of the holder's own run."""
    recorded = record.process
    if recorded is None or record.pid not in holder.run_pids:
        return False
    live = holder.identity if record.pid == holder.pid else identity_of(record.pid)
    return live is not None and same_process(recorded, live)


def _refuse_live_other(holder: Holder, record: SessionRecord | None) -> None:
    if record is None or _same_holder(holder, record) or not blocks_reclaim(record):
        return
    raise SessionLockHeld(
        f"another live firstmate session holds the lock (pid {record.pid}); "
        "operate read-only until resolved",
        holder_pid=record.pid,
    )


def _write(home: Home, record: SessionRecord) -> None:
    path = record_path(home)
    try:
        atomic_write(path, record.to_json().encode())
    except OSError as exc:
        raise SessionLockError(
            f"cannot write session lock ({exc.strerror}); operate read-only, fix the state "
            "directory (space, permissions) and retry fm lock acquire"
        ) from exc
    back = read_record(home)
    if back.record is None:
        raise SessionLockError(
            "cannot verify session lock ownership (it does not read back); "
            "operate read-only and retry fm lock acquire"
        )
    if back.record != record:
        raise SessionLockError(
            f"session lock ownership verification failed (it names pid {back.record.pid}); "
            "operate read-only and retry fm lock acquire",
            holder_pid=back.record.pid,
        )


@attrs.frozen
class ReleaseResult:
    #: The pid whose record was removed; None when the lock was already free.
    released_pid: int | None

    @property
    def line(self) -> str:
        if self.released_pid is None:
            return "lock: free (nothing to release)"
        return f"lock released: harness pid {self.released_pid}"


def release(
    home: Home, env: Mapping[str, str] | None = None, chain: Sequence[ProcInfo] | None = None
) -> ReleaseResult:
    """Remove the record if (and only if) it belongs to the caller's session."""
    found = read_record(home)
    if found.kind == "absent":
        return ReleaseResult(None)
    with _acquire_lock(home):
        found = read_record(home)
        _refuse_unsafe(found)
        if found.kind == "absent":
            return ReleaseResult(None)
        record = found.record
        if record is None:
            raise SessionLockError(
                "session lock is unreadable, nothing released; run fm lock acquire to replace it"
            )
        if not owned_by_self(record, env=env, chain=chain):
            raise SessionLockError(
                f"session lock belongs to pid {record.pid}, not to this session, nothing "
                "released; leave it to that session (fm lock status says whether it is live)",
                holder_pid=record.pid,
            )
        sessionmemo.forget(home)
        try:
            os.unlink(record_path(home))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise SessionLockError(
                f"cannot remove session lock ({exc.strerror}); check the state directory"
            ) from exc
        return ReleaseResult(record.pid)


def recheck_owned(
    home: Home, env: Mapping[str, str] | None = None, chain: Sequence[ProcInfo] | None = None
) -> str | None:
    """None while the caller's session owns the lock; else one line saying why not to re-arm.

    The continuity engine calls this before every arm launch. Every line starts with
    ``session lock`` and ends with ``not re-arming``.
    """
    ins = inspect(home)
    if ins.record is not None and owned_by_self(ins.record, env=env, chain=chain):
        return None
    if ins.state == "free":
        return "session lock is free; run fm lock acquire in the primary session; not re-arming"
    if ins.state == "unreadable":
        return "session lock is unreadable; fm lock acquire replaces it; not re-arming"
    if ins.state == "held":
        return f"session lock is held by live harness pid {ins.pid}; not re-arming"
    if ins.state == "unknown":
        return f"session lock is held by pid {ins.pid}, whose identity cannot be read; not re-arming"
    return (
        f"session lock is stale (pid {ins.pid} dead or not a harness); "
        "fm lock acquire reclaims it; not re-arming"
    )


__all__ = [
    "AcquireResult",
    "HarnessNotFound",
    "Holder",
    "LiveFacts",
    "LockInspection",
    "LockState",
    "OwnerStatus",
    "RecordRead",
    "ReleaseResult",
    "SessionLockError",
    "SessionLockHeld",
    "SessionRecord",
    "TrustedSession",
    "acquire",
    "blocks_reclaim",
    "classify",
    "inspect",
    "owned_by_self",
    "probe",
    "read_record",
    "recheck_owned",
    "record_path",
    "release",
    "resolve_holder",
    "same_process",
    "trusted_session",
]
