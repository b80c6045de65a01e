"""Is a crew's pane still the one it was bound to?

A crew is bound to tmux's stable pane id (``%12``), which no other pane of that server ever
takes, and to the pane's program as it was when bound: its pid and that process's start time
(clock ticks since boot, ``/proc/PID/stat``). :func:`judge` holds what tmux says of the pane now
(a :class:`~firstmate.watch.backends.tmux.PaneFact`) against the registration:

* no such pane: **gone**;
* a pane of that id whose program is another (another pid, or the same pid started at another
  time: a restarted tmux server reuses ids): **gone**, *replaced* — it is not the crew's pane;
* the crew's pane, its program ended and the pane kept (remain-on-exit): **dead**;
* else **live**.

A start time that cannot be read (a pid namespace ``/proc`` does not show) is not held against
the pane: the pid decides. Nothing is typed into, read for a wake from, or ended in a pane that
is not **live** (or, to end it, **dead**) by this judgement.

A registration that names a position (written before panes were bound, or added while its pane
did not exist) is bound by :func:`bind_position` the first time fm looks at it: to the pane the
position names then, unless another registered crew is bound to that pane.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

from firstmate.store import crew as crewmod
from firstmate.store.home import Home
from firstmate.watch.backends.base import CrewBackend
from firstmate.watch.backends.tmux import DEAD, GONE, LIVE, PaneFact, PaneListing

__all__ = ["Verdict", "bind_position", "busy", "fact_of", "holder", "judge", "start_ticks"]


def start_ticks(pid: int) -> int | None:
    """When process *pid* started, in clock ticks since boot; None when ``/proc`` cannot say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return int(stat[stat.rfind(b")") + 2:].split()[19])
    except (OSError, IndexError, ValueError):
        return None


@attrs.frozen
class Verdict:
    """:func:`judge`'s answer: :data:`LIVE`, :data:`DEAD` or :data:`GONE`, and why (for a
    message: "is gone", "has ended", "now runs another program ...")."""

    state: str
    why: str = ""
    #: A pane of that id exists, but runs a program the crew was not bound to.
    replaced: bool = False


def judge(member: crewmod.Crew, fact: PaneFact | None,
          start_of: Callable[[int], int | None] = start_ticks) -> Verdict:
    """Whether *fact* (what tmux says of the crew's pane now, None: no such pane) is the pane
    *member* is bound to, and its state."""
    if fact is None:
        return Verdict(GONE, "is gone")
    if member.pid is not None and fact.pid != member.pid:
        return Verdict(GONE, f"now runs another program (pid {fact.pid}, not the registered "
                             f"{member.pid})", replaced=True)
    if member.started is not None and not fact.dead:
        started = start_of(fact.pid)
        if started is not None and started != member.started:
            return Verdict(GONE, f"now runs another program (pid {fact.pid} was restarted)",
                           replaced=True)
    if fact.dead:
        return Verdict(DEAD, "has ended")
    return Verdict(LIVE)


def fact_of(listing: PaneListing, member: crewmod.Crew) -> PaneFact | None:
    """The listed facts of *member*'s pane: by its id, or by the position it was registered by."""
    pane = member.pane if member.bound else listing.ids.get(member.pane)
    return None if pane is None else listing.facts.get(pane)


def busy(backend: CrewBackend, member: crewmod.Crew) -> bool:
    """Positive evidence that *member*'s agent is working, read from its own pane only: with a
    program recorded, the pane is read in the same tmux call that checks it still runs that pid
    (a pane that does not is never busy); a registration by a position not bound yet (the
    watcher binds it at its next look at the panes) is not read from a pane that may be another
    crew's. Never raises (a broken backend is no evidence)."""
    try:
        bound = getattr(backend, "capture_bound", None)
        judge_text = getattr(backend, "busy_in", None)
        if callable(bound) and callable(judge_text):
            if not member.bound:
                return False
            if member.pid is not None:
                content = bound(member.pane, member.pid)
                return content is not None and bool(judge_text(content))
        return bool(backend.busy(member.pane))
    except Exception:
        return False


def holder(members: Iterable[crewmod.Crew], pane: str, name: str) -> str | None:
    """The registered crew other than *name* bound to pane id *pane*, if any."""
    return next((m.name for m in members if m.name != name and m.bound and m.pane == pane), None)


def bind_position(home: Home, member: crewmod.Crew, fact: PaneFact | None,
                  members: Iterable[crewmod.Crew],
                  start_of: Callable[[int], int | None] = start_ticks) -> crewmod.Crew:
    """*member*, bound to the pane its position names now (*fact*, None: none) and written so;
    *member* as it is when it is bound already, names no pane, names one another registered
    crew is bound to, or its registration changed meanwhile."""
    if member.bound or fact is None or holder(members, fact.pane, member.name) is not None:
        return member
    started = None if fact.dead else start_of(fact.pid)
    bound = crewmod.bind(home, member, fact.pane, fact.pid, started)
    return member if bound is None else bound
