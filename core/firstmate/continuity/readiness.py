"""Reading an arm's readiness: its first status line, classified by the plugins
(``firstmate_readiness``; the core's own reading when a plugin breaks), with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from firstmate.continuity.armchild import EXITED, TIMEOUT, ArmChild
from firstmate.continuity.enginevalues import identity_token
from firstmate.plugin.handoff import ArmRef, Readiness

if TYPE_CHECKING:
    from firstmate.plugin.manager import PluginHost


@attrs.define(eq=False)
class ReadinessReader:
    host: PluginHost
    #: Seconds an arm has to print its status line.
    timeout: float
    #: One human-readable line per event, and one diagnostic line.
    note: Callable[[str], None]
    diag: Callable[[str], None]

    def adopt_if_ready(self, arm: ArmChild) -> None:
        """A retained arm that has since printed a ready status line is a successor after all."""
        for line in arm.lines():
            reading = self.classify(line, arm.ref)
            if reading.kind == "other":
                continue
            if reading.ready:
                arm.readiness, arm.retained = reading, False
                arm.ready_at = time.monotonic()
                arm.watcher_identity = identity_token(reading.watcher_pid)
                self.diag(f"adopted arm={arm.pid} (ready after all)")
            return

    def await_ready(self, arm: ArmChild) -> Readiness | None:
        """The arm's first ready or failed line; a failed reading when it exits without one;
        None when the readiness timeout runs out first."""
        deadline = time.monotonic() + self.timeout
        index = 0
        while True:
            found, line = arm.next_line(index, deadline)
            if found == TIMEOUT:
                self.diag(f"readiness-timeout arm={arm.pid} after="
                           f"{self.timeout:g}s")
                return None
            if found == EXITED:
                return Readiness(False, "failed", line="")
            index += 1
            reading = self.classify(line, arm.ref)
            if reading.kind == "other":
                continue
            arm.readiness = reading
            self.note(f"arm {arm.pid}" + (f" (successor of {arm.ref.predecessor_pid})"
                                           if arm.ref.predecessor_pid else "") + f": {line}")
            if reading.ready:
                arm.ready_at = time.monotonic()
                arm.watcher_identity = identity_token(reading.watcher_pid)
            self.diag(f"readiness arm={arm.pid} kind={reading.kind} "
                       f"watcher={reading.watcher_pid} generation={reading.generation}")
            return reading

    def classify(self, line: str, ref: ArmRef) -> Readiness:
        try:
            return self.host.readiness(line, ref)
        except Exception:  # a broken plugin: fall back to the core's reading
            return Readiness.parse(line)


__all__ = ["ReadinessReader"]
