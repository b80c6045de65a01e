"""``fm crew steer``, ``fm crew stop`` and what ``fm crew list`` shows of each crew.

All three go through the tmux crew backend (``FM_TMUX``, ``FM_TMUX_SOCKET``), whose every call is
bounded in time and never raises for a missing pane.
"""

from __future__ import annotations

import attrs

from firstmate.base.errors import FirstmateError, UsageError
from firstmate.store import crew as crewmod
from firstmate.store.home import Home
from firstmate.watch.backends.tmux import DEAD, GONE, LIVE, TmuxBackend

#: Longest instruction ``fm crew steer`` types (bytes of UTF-8).
MAX_STEER_BYTES = 16000


@attrs.frozen
class Steered:
    name: str
    pane: str
    text: str


def steer(home: Home, backend: TmuxBackend, name: str, text: str) -> Steered:
    """Type *text* (one line: line breaks become spaces, controls are dropped) into the crew's
    pane and press Enter; refused when the pane is gone or its program has ended."""
    member = crewmod.get(home, name)
    line = crewmod.clean_text(text, MAX_STEER_BYTES)
    if not line:
        raise UsageError(f'empty instruction: run fm crew steer {name} "<what to do next>"')
    state = backend.pane_state(member.pane)
    if state == GONE:
        raise FirstmateError(f"crew {name!r}'s pane {member.pane} is gone; nothing was typed - "
                             f"fm crew stop {name} unregisters it")
    if state == DEAD:
        raise FirstmateError(f"crew {name!r}'s harness in pane {member.pane} has ended; nothing "
                             f"was typed - fm crew stop {name} unregisters it")
    if state != LIVE:
        raise FirstmateError(f"cannot ask tmux about pane {member.pane}: {backend.last_error}; "
                             "nothing was typed - check FM_TMUX and FM_TMUX_SOCKET")
    if not backend.send(member.pane, line):
        raise FirstmateError(f"typing into pane {member.pane} failed: {backend.last_error}")
    return Steered(name, member.pane, line)


@attrs.frozen
class Stopped:
    name: str
    pane: str
    #: Whether a pane was there to end.
    killed: bool
    #: Where its last screen and scrollback were kept, if they could be read.
    pane_log: str | None


def stop(home: Home, backend: TmuxBackend, name: str) -> Stopped:
    """Keep the crew's last screen, end its pane (its window closes with it) and unregister it;
    its status log, turn-end marker and pane log stay (until a crew of that name is added)."""
    from firstmate.app.crewspawn import remove_launch_dir

    member = crewmod.get(home, name)
    state = backend.pane_state(member.pane)
    if state not in (LIVE, DEAD, GONE):
        raise FirstmateError(f"cannot ask tmux about pane {member.pane}: {backend.last_error}; "
                             f"crew {name!r} is still registered - fix tmux (FM_TMUX, "
                             f"FM_TMUX_SOCKET), or drop the crew and its logs with fm crew "
                             f"remove {name}")
    saved = None
    killed = False
    if state in (LIVE, DEAD):
        screen = backend.history(member.pane)
        if screen is not None:
            saved = str(crewmod.save_pane_log(home, name, screen))
        killed = backend.kill_pane(member.pane)
        if not killed and backend.pane_state(member.pane) in (LIVE, DEAD):
            raise FirstmateError(f"cannot end crew {name!r}'s pane {member.pane}: "
                                 f"{backend.last_error}; it is still registered")
    crewmod.unregister(home, name)
    remove_launch_dir(home, name)
    return Stopped(name, member.pane, killed, saved)


@attrs.frozen
class CrewRow:
    """One crew as ``fm crew list`` shows it."""

    name: str
    pane: str
    added_at: float
    #: The harness ``fm crew spawn`` started, or None for a crew registered by hand.
    harness: str | None
    #: ``live``, ``dead`` (its program ended), ``gone`` or ``unknown`` (tmux could not say).
    pane_state: str
    last_text: str | None
    last_at: float | None
    open_decisions: int

    def age(self, now: float) -> float | None:
        """Seconds since the last status line, when it carries its stamp."""
        return None if self.last_at is None else max(0.0, now - self.last_at)

    def as_json(self, now: float) -> dict[str, object]:
        age = self.age(now)
        last = None if self.last_text is None else {
            "at": self.last_at, "text": self.last_text,
            "age_seconds": None if age is None else round(age, 1)}
        return {"name": self.name, "pane": self.pane, "added_at": self.added_at,
                "harness": self.harness, "pane_state": self.pane_state, "last_status": last,
                "open_decisions": self.open_decisions}


def rows(home: Home, backend: TmuxBackend) -> list[CrewRow]:
    """Every registered crew, by name, with one tmux call for all their panes."""
    members = crewmod.list(home)
    states = backend.pane_states() if members else {}
    found = []
    for member in members:
        last = crewmod.last_line(home, member.name)
        state = "unknown" if states is None else states.get(member.pane, GONE)
        found.append(CrewRow(
            name=member.name, pane=member.pane, added_at=member.added_at,
            harness=crewmod.harness(home, member.name), pane_state=state,
            last_text=None if last is None else crewmod.clean_text(last.text),
            last_at=None if last is None else last.at,
            open_decisions=len(crewmod.open_decisions(home, member.name))))
    return found


def age_text(seconds: float | None) -> str:
    """``42s``, ``7m``, ``3h``, ``2d``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


__all__ = ["MAX_STEER_BYTES", "CrewRow", "Steered", "Stopped", "age_text", "rows",
           "steer", "stop"]
