"""``fm crew steer``, ``fm crew answer``, ``fm crew stop`` and what ``fm crew list`` shows of
each crew.

All three go through the tmux crew backend (``FM_TMUX``, ``FM_TMUX_SOCKET``), whose every call is
bounded in time and never raises for a missing pane. Before anything is typed into a crew's pane
or the pane is ended, it is checked to be the pane the crew is bound to, running the program it
was bound with (:mod:`firstmate.watch.backends.panes`); otherwise nothing is typed or ended and
the refusal names the fix. A crew registered by a position is bound to the pane that position
names the first time one of these looks at it.
"""

from __future__ import annotations

import attrs

from firstmate.base.errors import FirstmateError, UsageError
from firstmate.fleet.names import remote_host
from firstmate.store import crew as crewmod
from firstmate.store.home import Home
from firstmate.watch.backends.panes import Verdict, bind_position, fact_of, holder, judge
from firstmate.watch.backends.tmux import DEAD, GONE, LIVE, UNKNOWN, PaneListing, TmuxBackend

#: The pane state of a crew of another host (:func:`firstmate.fleet.names.remote_host`).
REMOTE = "remote"
#: Longest instruction ``fm crew steer`` types (bytes of UTF-8).
MAX_STEER_BYTES = 16000


def current(home: Home, backend: TmuxBackend, member: crewmod.Crew,
            undone: str = "nothing was typed",
            unasked: str = "check FM_TMUX and FM_TMUX_SOCKET") -> tuple[crewmod.Crew, Verdict]:
    """*member* (bound now if it was registered by a position) and the :class:`Verdict` on its
    pane, from one tmux call; refused (*undone* says what was not done) when tmux cannot be
    asked (*unasked* is the fix), or when the position names a pane another crew is bound to,
    or the crew works on another host (its pane is there, not in the local tmux)."""
    host = remote_host(member.pane)
    if host is not None:
        raise FirstmateError(f"crew {member.name!r} works on host {host}, whose panes are not "
                             f"reachable from here; {undone} - run it there, or drop the crew "
                             f"here with fm crew remove {member.name} (its host registers it "
                             "again with its next report)")
    fact = backend.resolve(member.pane)
    if fact is None and backend.last_exit is None:
        raise FirstmateError(f"cannot ask tmux about pane {member.shown}: {backend.last_error}; "
                             f"{undone} - {unasked}")
    if not member.bound and fact is not None:
        members = crewmod.list(home)
        other = holder(members, fact.pane, member.name)
        if other is not None:
            raise FirstmateError(
                f"crew {member.name!r} was added by position {member.pane}, which is now pane "
                f"{fact.pane}, crew {other!r}'s; {undone} - bind {member.name} to its own pane "
                f"with fm crew add {member.name} --pane TARGET --replace")
        member = bind_position(home, member, fact, members)
    return member, judge(member, fact)


def refusal(member: crewmod.Crew, verdict: Verdict, undone: str) -> FirstmateError:
    """The one-line refusal for a pane that is not the crew's live pane, naming the fix."""
    name = member.name
    if verdict.replaced:
        fix = (f"if it is still the crew's, bind the crew to it again with fm crew add {name} "
               f"--pane {member.pane} --replace; else fm crew remove {name}")
    else:
        fix = (f"fm crew stop {name} unregisters it (or fm crew add {name} --pane TARGET "
               "--replace binds it to the pane the crew runs in now)")
    what = "harness in pane" if verdict.state == DEAD else "pane"
    return FirstmateError(f"crew {name!r}'s {what} {member.shown} {verdict.why}; {undone} - {fix}")


def typable(home: Home, backend: TmuxBackend, name: str,
            undone: str = "nothing was typed") -> crewmod.Crew:
    """The crew *name*, once its pane is checked to be its live pane; else refused (*undone*
    says what was not done)."""
    member, verdict = current(home, backend, crewmod.get(home, name), undone)
    if verdict.state != LIVE:
        raise refusal(member, verdict, undone)
    return member


@attrs.frozen
class Steered:
    name: str
    pane: str
    text: str


def steer(home: Home, backend: TmuxBackend, name: str, text: str) -> Steered:
    """Type *text* (one line: line breaks become spaces, controls are dropped) into the crew's
    pane and press Enter; refused when the pane is gone, ended, or not the crew's any more."""
    crewmod.get(home, name)
    line = crewmod.clean_text(text, MAX_STEER_BYTES)
    if not line:
        raise UsageError(f'empty instruction: run fm crew steer {name} "<what to do next>"')
    member = typable(home, backend, name)
    if not backend.send(member.pane, line):
        raise FirstmateError(f"typing into pane {member.pane} failed: {backend.last_error}")
    return Steered(name, member.pane, line)


@attrs.frozen
class Answered:
    decision: crewmod.Decision
    #: The pane the answer is to be typed into (checked to be the crew's live pane), or None.
    pane: str | None = None
    #: Why typing it failed (the answer is recorded), or None.
    unsent: str | None = None


def answer(home: Home, backend: TmuxBackend, name: str, key: str, text: str, *,
           send: bool) -> Answered:
    """Close crew *name*'s open decision *key* with *text*; with *send*, also type the answer
    line into its pane (then Enter). The pane is checked before anything is recorded, so a
    refusal records nothing; typing that fails after the answer was recorded is reported in
    :attr:`Answered.unsent`."""
    pane = None
    if send:
        pane = typable(home, backend, crewmod.validate_name(name),
                       "the answer was not recorded and nothing was typed").pane
    decision = crewmod.answer(home, name, key, text)
    if pane is None or backend.send(pane, crewmod.answer_line(decision.key, text)):
        return Answered(decision, pane)
    return Answered(decision, pane, backend.last_error or "tmux failed")


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
    its status log, turn-end marker and pane log stay (until a crew of that name is added). A
    pane that runs another program than the crew's is left alone, and the crew registered."""
    from firstmate.app.crewspawn import remove_launch_dir

    undone = f"crew {name!r} is still registered"
    member, verdict = current(
        home, backend, crewmod.get(home, name), undone, "fix tmux (FM_TMUX, FM_TMUX_SOCKET), or "
        f"drop the crew and its logs with fm crew remove {name}")
    if verdict.replaced:
        raise refusal(member, verdict, f"nothing was ended and {undone}")
    saved = None
    killed = False
    if verdict.state in (LIVE, DEAD):
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


def pane_states(home: Home, backend: TmuxBackend, members: tuple[crewmod.Crew, ...], *,
                bind: bool = True) -> tuple[tuple[crewmod.Crew, str], ...]:
    """Each crew (bound now when it was registered by a position, with *bind*) and the state of
    its pane, from one tmux call: ``live``, ``dead``, ``gone`` (no such pane, or not the crew's),
    ``unknown`` (tmux could not be asked) or ``remote`` (a crew of another host)."""
    listing = backend.listing() if members else PaneListing()
    if listing is None:
        return tuple((member, UNKNOWN) for member in members)
    found = []
    for member in members:
        if remote_host(member.pane) is not None:
            found.append((member, REMOTE))  # (on its host, which the local tmux cannot see)
            continue
        fact = fact_of(listing, member)
        if bind and not member.bound:
            member = bind_position(home, member, fact, members)
        if not member.bound and fact is not None and holder(members, fact.pane, member.name):
            found.append((member, GONE))  # (its position names another crew's pane)
            continue
        found.append((member, judge(member, fact).state))
    return tuple(found)


@attrs.frozen
class CrewRow:
    """One crew as ``fm crew list`` shows it."""

    name: str
    #: The pane the crew is bound to (its id), or the position it was registered by.
    pane: str
    added_at: float
    #: The harness ``fm crew spawn`` started, or None for a crew registered by hand.
    harness: str | None
    #: ``live``, ``dead`` (its program ended), ``gone`` (no such pane, or not the crew's any
    #: more), ``unknown`` (tmux could not say) or ``remote`` (a crew of another host,
    #: docs/fleet-remote.md).
    pane_state: str
    last_text: str | None
    last_at: float | None
    open_decisions: int
    #: The target the crew was added with, when it is not :attr:`pane`.
    label: str | None = None

    @property
    def shown(self) -> str:
        return self.pane if self.label is None else f"{self.pane} [{self.label}]"

    def age(self, now: float) -> float | None:
        """Seconds since the last status line, when it carries its stamp."""
        return None if self.last_at is None else max(0.0, now - self.last_at)

    def as_json(self, now: float) -> dict[str, object]:
        age = self.age(now)
        last = None if self.last_text is None else {
            "at": self.last_at, "text": self.last_text,
            "age_seconds": None if age is None else round(age, 1)}
        return {"name": self.name, "pane": self.pane, "label": self.label,
                "added_at": self.added_at, "harness": self.harness,
                "pane_state": self.pane_state, "last_status": last,
                "open_decisions": self.open_decisions}


def rows(home: Home, backend: TmuxBackend) -> list[CrewRow]:
    """Every registered crew, by name, with one tmux call for all their panes."""
    found = []
    for member, state in pane_states(home, backend, crewmod.list(home)):
        last = crewmod.last_line(home, member.name)
        found.append(CrewRow(
            name=member.name, pane=member.pane, added_at=member.added_at,
            harness=crewmod.harness(home, member.name), pane_state=state,
            last_text=None if last is None else crewmod.clean_text(last.text),
            last_at=None if last is None else last.at,
            open_decisions=len(crewmod.open_decisions(home, member.name)), label=member.label))
    return found


def age_text(seconds: float | None) -> str:
    """``42s``, ``7m``, ``3h``, ``2d``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


__all__ = ["MAX_STEER_BYTES", "Answered", "CrewRow", "Steered", "Stopped", "age_text", "answer", "current", "pane_states", "refusal", "rows", "steer", "stop", "typable"]
