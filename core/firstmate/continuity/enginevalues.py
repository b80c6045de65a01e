"""The continuity engine's values: its knobs and their defaults, its settings, what one
restoration reached, one look at an owner, and its diagnostic log."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from firstmate.base.envnum import env_int
from firstmate.base.errors import FirstmateError
from firstmate.base.exitcodes import ExitCode
from firstmate.base.waketext import one_line
from firstmate.continuity.armchild import ArmChild
from firstmate.plugin.handoff import HandoffResult, Readiness, Session

if TYPE_CHECKING:
    from firstmate.store.ledgers import BoundedLog

PREDECESSOR_ENV = "FM_WATCH_PREDECESSOR_ARM_PID"
READINESS_ENV = "FM_WATCH_READINESS_TIMEOUT_MS"
RETIRE_ENV = "FM_WATCH_ARM_RETIRE_TIMEOUT_MS"
RETRY_BASE_ENV = "FM_WATCH_REARM_RETRY_BASE_MS"
RETRY_MAX_ENV = "FM_WATCH_REARM_RETRY_MAX_MS"
RETRY_LIMIT_ENV = "FM_WATCH_REARM_RETRY_LIMIT"
LOG_KEEP_ENV = "FM_WATCH_EXTENSION_LOG_KEEP_LINES"
LOG_MAX_ENV = "FM_WATCH_EXTENSION_LOG_MAX_BYTES"

DEFAULT_READINESS = 12.0
DEFAULT_RETIRE = 1.0
DEFAULT_RETRY_BASE = 0.25
DEFAULT_RETRY_MAX = 4.0
DEFAULT_RETRY_LIMIT = 5
DEFAULT_LOG_MAX_BYTES = 262144
#: Bound on one ``fm arm --handling-delivered`` run.
CONFIRM_TIMEOUT = 30.0
#: An arm that watched at least this long before failing starts a fresh failure streak.
STABLE_AFTER = 60.0
FAILED = "watcher: FAILED - "


class ContinuityRefused(FirstmateError):
    """The engine will not launch an arm (this session does not own the session lock)."""

    exit_code = ExitCode.FAILED


# --- settings ----------------------------------------------------------------------------------


@attrs.frozen
class Settings:
    """Timing of one owner. Milliseconds in the environment, seconds here."""

    readiness_timeout: float = DEFAULT_READINESS
    retire_timeout: float = DEFAULT_RETIRE
    retry_base: float = DEFAULT_RETRY_BASE
    retry_max: float = DEFAULT_RETRY_MAX
    #: Arm starts one restoration may make (the first start included).
    retry_limit: int = DEFAULT_RETRY_LIMIT
    #: Lines kept in ``state/logs/continuity.log``; 0 (the default) keeps no log.
    log_keep_lines: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str], *,
                 readiness_timeout: float = DEFAULT_READINESS) -> Settings:
        """The settings *env* asks for; junk, zero or negative values keep the defaults.
        *readiness_timeout* is the harness's own default (seconds)."""
        values = env

        def seconds(name: str, default: float) -> float:
            return env_int(values, name, max(1, round(default * 1000))) / 1000.0

        base = seconds(RETRY_BASE_ENV, DEFAULT_RETRY_BASE)
        return cls(
            readiness_timeout=seconds(READINESS_ENV, readiness_timeout),
            retire_timeout=seconds(RETIRE_ENV, DEFAULT_RETIRE),
            retry_base=base,
            retry_max=max(base, seconds(RETRY_MAX_ENV, DEFAULT_RETRY_MAX)),
            retry_limit=env_int(values, RETRY_LIMIT_ENV, DEFAULT_RETRY_LIMIT),
            log_keep_lines=env_int(values, LOG_KEEP_ENV, 0),
        )

    def delay(self, retry: int) -> float:
        """Seconds before retry number *retry* (1 is the first retry): base, doubling, capped."""
        return float(min(self.retry_max, self.retry_base * 2 ** min(max(0, retry - 1), 32)))


# --- results -----------------------------------------------------------------------------------


@attrs.frozen(eq=False)
class Restoration:
    """What one restoration reached (internal: it carries the live successor object)."""

    successor: ArmChild | None = None
    handoff: HandoffResult | None = None
    #: The one typed ``watcher: FAILED - …`` line, when restoration failed.
    failure: str | None = None
    attempts: int = 0
    #: The successor closed actionably before it could be confirmed: its own close carries on.
    superseded: bool = False
    #: (failure path) the closed arm's reason line arrived late: handle it as actionable.
    switched: bool = False
    #: The owner is shutting down: deliver nothing.
    stopped: bool = False
    #: The successor was retired after a failed confirmation: restore once more, afterwards.
    repair: bool = False
    #: An unready arm would not retire: it keeps the slot and its close is a new event.
    retained: bool = False


@attrs.frozen
class EngineState:
    """One look at an owner, for status lines and tests."""

    #: ``empty``, ``arm`` (a live child), ``retained`` (an unready child that would not retire)
    #: or ``retry-scheduled`` (a backoff delay is running).
    slot: str
    arm_pid: int | None
    #: Every arm pid this owner launched, oldest first.
    launches: tuple[int, ...]
    #: The typed line the owner stood down with (lock lost, restoration exhausted), else None.
    standing_down: str | None
    #: Wakes handed to the delivery hook so far.
    deliveries: int
    #: Wakes queued or being delivered right now.
    pending_deliveries: int = 0


def strip_failed(text: str) -> str:
    text = one_line(text)
    return text[len(FAILED):] if text.startswith(FAILED) else text


def identity_token(pid: int | None) -> str | None:
    if pid is None:
        return None
    from firstmate.store.identity import identity_of

    found = identity_of(pid)
    return found.token() if found is not None else None


def diagnostic_log(session: Session, settings: Settings) -> BoundedLog | None:
    """``state/logs/continuity.log`` when ``FM_WATCH_EXTENSION_LOG_KEEP_LINES`` > 0, else None."""
    if settings.log_keep_lines <= 0:
        return None
    from firstmate.store.ledgers import BoundedLog

    return BoundedLog(session.home.logs / "continuity.log", LOG_MAX_ENV, LOG_KEEP_ENV,
                      (DEFAULT_LOG_MAX_BYTES, settings.log_keep_lines), env=session.env,
                      stamp=True)


def failure_line(display_name: str, attempts: int, why: str) -> str:
    """The one typed ``watcher: FAILED - …`` line of a restoration that failed."""
    noun = "attempt" if attempts == 1 else "attempts"
    return (f"{FAILED}{display_name} could not restore the watcher after {attempts} "
            f"{noun}: {one_line(why, 600)}")


def why_unready(arm: ArmChild, readiness: Readiness | None, readiness_timeout: float,
                retire_timeout: float) -> str:
    """Why *arm* did not become ready, in words."""
    if readiness is None:
        return f"arm pid={arm.pid} printed no status line within {readiness_timeout:g}s"
    if readiness.kind == "failed" and readiness.line:
        return f"arm pid={arm.pid} said: {strip_failed(readiness.line)}"
    arm.wait_exit(retire_timeout)
    code = arm.returncode
    status = "was still running" if code is None else f"exited with status {code}"
    if readiness.ready:
        return f"arm pid={arm.pid} {status} right after its status line"
    return f"arm pid={arm.pid} {status} before printing a status line"


def why_closed(arm: ArmChild) -> str:
    """Why *arm* closed without a reason line, in words."""
    failed = [line for line in arm.lines() if line.startswith(FAILED)]
    if failed:
        return strip_failed(failed[-1])
    return f"arm pid={arm.pid} exited with status {arm.returncode} without a reason line"


__all__ = [
    "CONFIRM_TIMEOUT",
    "FAILED",
    "LOG_KEEP_ENV",
    "PREDECESSOR_ENV",
    "READINESS_ENV",
    "RETIRE_ENV",
    "RETRY_BASE_ENV",
    "RETRY_LIMIT_ENV",
    "RETRY_MAX_ENV",
    "ContinuityRefused",
    "EngineState",
    "Restoration",
    "Settings",
    "diagnostic_log",
    "failure_line",
    "identity_token",
    "strip_failed",
    "why_closed",
    "why_unready",
]
