"""Values that cross the continuity hooks: a close, an arm's status line, a handoff, a wake.

Every class here is frozen: a hook receives facts and answers with facts, it never mutates the
engine's state through them (see ``firstmate.continuity.engine`` for the engine and ``docs/hooks.md``
for the hooks). Named constructors parse foreign text (:meth:`Readiness.parse`); ``__init__``
stays free of logic.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from typing import Literal

import attrs

from firstmate.plugin.harness import REARM_OWNERS, read_only
from firstmate.store.home import Home

ReadinessKind = Literal["started", "attached", "failed", "other"]
READINESS_KINDS: tuple[str, ...] = ("started", "attached", "failed", "other")

#: ``watcher: started pid=<N> (beacon fresh)[ recovery-generation=<G>]``
_STARTED = re.compile(
    r"watcher: started pid=([0-9]{1,10}) \(beacon fresh\)"
    r"(?: recovery-generation=([A-Za-z0-9._-]{1,128}))?"
)
#: ``watcher: attached pid=<N> (beacon <age>s)``
_ATTACHED = re.compile(r"watcher: attached pid=([0-9]{1,10}) \(beacon [^()]*\)")
_FAILED = "watcher: FAILED"


@attrs.frozen
class Session:
    """The primary session a re-arm owner works for.

    Attributes:
        home: the state home.
        harness: the harness name (entry-point name, e.g. ``pi``).
        env: a snapshot of the environment arms and confirmations run with (read-only).
        owner_pid: the process that owns re-arm (a bridge, or a hook process).
    """

    home: Home
    harness: str
    env: Mapping[str, str] = attrs.field(converter=read_only, eq=False, hash=False,
                                         repr=False)
    owner_pid: int = attrs.field(factory=os.getpid)


@attrs.frozen
class RearmOwner:
    """Who re-arms the watcher for a session: one of :data:`firstmate.plugin.harness.REARM_OWNERS`."""

    kind: str = attrs.field(validator=attrs.validators.in_(REARM_OWNERS))
    detail: str = ""


@attrs.frozen
class ArmRef:
    """The arm process a status line came from."""

    pid: int
    #: The closed arm this one succeeds (``FM_WATCH_PREDECESSOR_ARM_PID``), or None.
    predecessor_pid: int | None = None
    harness: str = ""


@attrs.frozen
class Readiness:
    """One arm status line, classified.

    ``ready`` is true for ``started`` and ``attached`` (a verified watcher with a fresh beacon
    exists); ``failed`` lines are final and not ready; ``other`` lines say nothing about
    readiness and are skipped by the engine.
    """

    ready: bool
    kind: str = attrs.field(validator=attrs.validators.in_(READINESS_KINDS))
    watcher_pid: int | None = None
    #: ``recovery-generation=`` of a handling successor's started line.
    generation: str | None = None
    line: str = ""

    @classmethod
    def parse(cls, line: str) -> Readiness:
        """Classify one ``fm arm`` stdout line (the core's default reading)."""
        text = line.strip()
        started = _STARTED.fullmatch(text)
        if started is not None:
            return cls(True, "started", int(started.group(1)), started.group(2), text)
        attached = _ATTACHED.fullmatch(text)
        if attached is not None:
            return cls(True, "attached", int(attached.group(1)), None, text)
        if text.startswith(_FAILED):
            return cls(False, "failed", None, None, text)
        return cls(False, "other", None, None, text)


#: The brief's name for a classified arm line; the same class.
ArmLine = Readiness


@attrs.frozen
class Close:
    """An arm closed. Actionable when it carries at least one reason line."""

    reasons: tuple[str, ...]
    arm_pid: int
    watcher_pid: int | None = None
    #: The watcher's identity token, read while it was alive (None when never seen).
    watcher_identity: str | None = None
    #: When the (first) reason line was read, epoch seconds.
    at: float = attrs.field(factory=time.time)

    @property
    def actionable(self) -> bool:
        return bool(self.reasons)


@attrs.frozen
class HandoffResult:
    """What a handoff confirmation found.

    ``confirmed``: the successor now carries the handling episode (or there was nothing to
    confirm: ``noop``). ``superseded``: a newer pipeline moved the episode on; the wake is
    delivered like a confirmed one and nothing is retired. Neither: a restoration failure,
    described by ``message``.
    """

    confirmed: bool
    superseded: bool = False
    noop: bool = False
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.confirmed or self.superseded


@attrs.frozen
class Handoff:
    """A successor to confirm: ``fm arm --handling-delivered <generation> --watcher-pid <pid>``."""

    close: Close
    successor_arm_pid: int
    watcher_pid: int | None
    generation: str | None
    harness: str
    session: Session


@attrs.frozen
class WakeDelivery:
    """One wake for the model: ``text`` is complete (wrapped and sanitised) and is what a
    harness sends; the other fields are the same facts, for plugins that format their own."""

    harness: str
    text: str
    reasons: tuple[str, ...]
    #: The one typed ``watcher: FAILED - …`` line when restoration failed, else None.
    restoration_failure: str | None
    #: The close this wake reports; None for a restoration failure with no wake of its own.
    close: Close | None
    #: The handoff outcome the wake's own successor reached (None when nothing was confirmed).
    handoff: HandoffResult | None = None


@attrs.frozen
class DeliveryReceipt:
    """A harness plugin's answer: did the wake reach the harness (not: did the model read it)."""

    delivered: bool
    detail: str = ""


__all__ = [
    "READINESS_KINDS",
    "ArmLine",
    "ArmRef",
    "Close",
    "DeliveryReceipt",
    "Handoff",
    "HandoffResult",
    "Readiness",
    "ReadinessKind",
    "RearmOwner",
    "Session",
    "WakeDelivery",
]
