"""Stale panes: a crew whose pane stopped changing while its agent is not working.

Each poll captures every registered crew's pane through the crew backend and hashes it
(trailing blanks ignored). A pane is **stale** when the same hash was seen by at least two polls
spanning at least ``FM_POLL`` seconds (default 15: event-driven polls can come milliseconds
apart, and two of those prove nothing) and the backend does not report it busy. Reason line
``stale: <crew>`` (key ``<crew>``). After the watcher made that row durable, :meth:`commit`
records the hash as surfaced, and the pane stays suppressed until its content changes.

A pane that cannot be captured is skipped with one triage line when it goes missing (the status
source already surfaces a silent crew through its turn-end marker). Per-crew state lives in
``state/crew/NAME.pane-state``: ``<hash> <polls seen, max 2> <first seen epoch> <surfaced hash|->``.
"""

from __future__ import annotations

import hashlib

import attrs

from firstmate.base.envnum import env_float
from firstmate.base.errors import FirstmateError
from firstmate.store import crew as crewmod
from firstmate.store.home import Home, atomic_write
from firstmate.watch.backends.base import CrewBackend
from firstmate.watch.sources.base import PollContext, Wake

DEFAULT_QUIET = 15.0


@attrs.frozen
class PaneState:
    digest: str
    count: int
    since: float
    surfaced: str = "-"

    def encode(self) -> bytes:
        return f"{self.digest} {self.count} {self.since:.3f} {self.surfaced}\n".encode()

    @classmethod
    def decode(cls, text: str | None) -> PaneState | None:
        parts = (text or "").split()
        if len(parts) != 4 or not parts[1].isdigit():
            return None
        try:
            since = float(parts[2])
        except ValueError:
            return None
        return cls(parts[0], int(parts[1]), since, parts[3])


def pane_digest(content: str) -> str:
    lines = [line.rstrip() for line in content.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return hashlib.sha256("\n".join(lines).encode("utf-8", "replace")).hexdigest()


@attrs.define(eq=False)
class StaleSource:
    home: Home
    backend: CrewBackend | None
    name: str = "stale"
    _pending: dict[str, PaneState] = attrs.field(factory=dict, init=False)
    _due: dict[str, float] = attrs.field(factory=dict, init=False)
    _missing: set[str] = attrs.field(factory=set, init=False)

    def poll(self, ctx: PollContext) -> Wake | None:
        self._pending.clear()
        self._due.clear()
        if self.backend is None:
            return None
        quiet = env_float(ctx.env, "FM_POLL", DEFAULT_QUIET)
        for member in crewmod.list(self.home):
            try:
                wake = self._look(ctx, member, quiet)
            except FirstmateError as exc:
                self._note_missing(ctx, member.name, f"stale: {member.name}: skipped: {exc.message}")
                continue
            if wake is not None:
                return wake
        return None

    def commit(self, wake: Wake, ctx: PollContext) -> None:
        state = self._pending.pop(wake.key, None)
        if state is not None:
            self._write(wake.key, attrs.evolve(state, surfaced=state.digest))

    def next_due(self, ctx: PollContext) -> float | None:
        return min(self._due.values()) if self._due else None

    # --- internals -----------------------------------------------------------------------------

    def _look(self, ctx: PollContext, member: crewmod.Crew, quiet: float) -> Wake | None:
        assert self.backend is not None
        name = member.name
        content = self.backend.capture(member.pane)
        if content is None:
            why = self.backend.last_error or "no such pane"
            self._note_missing(ctx, name, f"stale: {name}: pane {member.pane} not captured: {why}")
            return None
        self._missing.discard(name)
        digest = pane_digest(content)
        state = PaneState.decode(crewmod.read_text(crewmod.path(self.home, name, crewmod.PANE_STATE)))
        if state is None or state.digest != digest:
            surfaced = state.surfaced if state is not None else "-"
            self._write(name, PaneState(digest, 1, ctx.now, surfaced))
            self._due[name] = ctx.now + quiet
            return None
        if state.count < 2:
            state = attrs.evolve(state, count=2)
            self._write(name, state)
        if state.surfaced == digest:
            return None  # already surfaced; suppressed until the content changes
        if ctx.now - state.since < quiet:
            self._due[name] = state.since + quiet
            return None
        if self._busy(member.pane, content):
            return None
        self._pending[name] = state
        return Wake("stale", name, f"stale: {name}")

    def _busy(self, pane: str, content: str) -> bool:
        assert self.backend is not None
        try:
            busy_in = getattr(self.backend, "busy_in", None)
            if callable(busy_in):
                return bool(busy_in(content))  # no second capture when the backend can judge text
            return bool(self.backend.busy(pane))
        except Exception:  # a broken backend is "no evidence", never a crash
            return False

    def _write(self, name: str, state: PaneState) -> None:
        atomic_write(crewmod.path(self.home, name, crewmod.PANE_STATE), state.encode())

    def _note_missing(self, ctx: PollContext, name: str, message: str) -> None:
        if name not in self._missing:
            self._missing.add(name)
            ctx.triage(message)
