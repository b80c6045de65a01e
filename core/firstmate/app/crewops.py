"""``fm crew steer``, ``fm crew answer``, ``fm crew stop`` and what ``fm crew list`` shows of
each crew.

All three go through the tmux crew backend (``FM_TMUX``, ``FM_TMUX_SOCKET``), whose every call is
bounded in time and never raises for a missing pane; a crew of another host of the home's fleet
goes through that host's, over SSH (:class:`~firstmate.watch.backends.hosts.CrewPanes`), with the
same checks. Before anything is typed into a crew's pane
or the pane is ended, it is checked to be the pane the crew is bound to, running the program it
was bound with (:mod:`firstmate.watch.backends.panes`); otherwise nothing is typed or ended and
the refusal names the fix. A crew registered by a position is bound to the pane that position
names the first time one of these looks at it.
"""

from __future__ import annotations

import attrs

from firstmate.base.errors import FirstmateError, UsageError
from firstmate.fleet.sshhosts import NoAccess
from firstmate.store import crew as crewmod
from firstmate.store.home import Home
from firstmate.watch.backends.hosts import UNREACHABLE, CrewPanes, start_reader
from firstmate.watch.backends.panes import Verdict, bind_position, fact_of, holder, judge
from firstmate.watch.backends.tmux import DEAD, GONE, LIVE, UNKNOWN, PaneListing, TmuxBackend

#: The pane state of a crew of another host whose panes fm does not read (no SSH settings).
REMOTE = "remote"
#: What the crew commands are given: this machine's tmux alone, or every host's.
Panes = TmuxBackend | CrewPanes


def route(backend: Panes, member: crewmod.Crew, undone: str) -> TmuxBackend:
    """The backend of the tmux *member*'s pane is on; refused (*undone* says what was not done)
    for a crew of a host fm does not reach (settings that do not verify raise their own
    error, exit 4)."""
    if member.host is None:
        return backend.local if isinstance(backend, CrewPanes) else backend
    if isinstance(backend, CrewPanes):
        try:
            return backend.host(member.host)
        except NoAccess:
            pass
    raise FirstmateError(
        f"crew {member.name!r} works on host {member.host}, whose panes fm does not reach from "
        f"here (no SSH settings); {undone} - give them with fm fleet host add {member.host} "
        f"--ssh [USER@]ADDRESS, or drop the crew here with fm crew remove {member.name} (its "
        "host registers it again with its next report)")


def _unasked(member: crewmod.Crew, unasked: str) -> str:
    if member.host is None:
        return unasked
    return (f"check host {member.host}'s SSH access (fm fleet host add {member.host} --ssh "
            "…) and that tmux runs there")
#: Longest instruction ``fm crew steer`` types (bytes of UTF-8).
MAX_STEER_BYTES = 16000


def current(home: Home, backend: Panes, member: crewmod.Crew,
            undone: str = "nothing was typed",
            unasked: str = "check FM_TMUX and FM_TMUX_SOCKET",
            ) -> tuple[crewmod.Crew, Verdict, TmuxBackend]:
    """*member* (bound now if it was registered by a position), the :class:`Verdict` on its
    pane from one tmux call, and the backend of the tmux it is on; refused (*undone* says what
    was not done) when tmux cannot be asked (*unasked* is the fix), when the position names a
    pane another crew is bound to, or when the crew's host cannot be reached."""
    tmux = route(backend, member, undone)
    fact = tmux.resolve(member.pane)
    if fact is None and tmux.last_exit is None:
        raise FirstmateError(f"cannot ask tmux about pane {member.shown}: {tmux.last_error}; "
                             f"{undone} - {_unasked(member, unasked)}")
    if member.host is None and not member.bound and fact is not None:
        members = crewmod.list(home)
        other = holder(members, fact.pane, member.name)
        if other is not None:
            raise FirstmateError(
                f"crew {member.name!r} was added by position {member.pane}, which is now pane "
                f"{fact.pane}, crew {other!r}'s; {undone} - bind {member.name} to its own pane "
                f"with fm crew add {member.name} --pane TARGET --replace")
        member = bind_position(home, member, fact, members)
    return member, judge(member, fact, start_reader(tmux)), tmux


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


def typable(home: Home, backend: Panes, name: str,
            undone: str = "nothing was typed") -> tuple[crewmod.Crew, TmuxBackend]:
    """The crew *name* and the backend of its tmux, once its pane is checked to be its live
    pane; else refused (*undone* says what was not done)."""
    member, verdict, tmux = current(home, backend, crewmod.get(home, name), undone)
    if verdict.state != LIVE:
        raise refusal(member, verdict, undone)
    return member, tmux


@attrs.frozen
class Steered:
    name: str
    pane: str
    text: str


def steer(home: Home, backend: Panes, name: str, text: str) -> Steered:
    """Type *text* (one line: line breaks become spaces, controls are dropped) into the crew's
    pane and press Enter; refused when the pane is gone, ended, or not the crew's any more."""
    crewmod.get(home, name)
    line = crewmod.clean_text(text, MAX_STEER_BYTES)
    if not line:
        raise UsageError(f'empty instruction: run fm crew steer {name} "<what to do next>"')
    member, tmux = typable(home, backend, name)
    if not tmux.send(member.pane, line):
        raise FirstmateError(f"typing into pane {member.shown} failed: {tmux.last_error}")
    return Steered(name, member.pane, line)


@attrs.frozen
class Answered:
    decision: crewmod.Decision
    #: The pane the answer is to be typed into (checked to be the crew's live pane), or None.
    pane: str | None = None
    #: Why typing it failed (the answer is recorded), or None.
    unsent: str | None = None


def answer(home: Home, backend: Panes, name: str, key: str, text: str, *,
           send: bool) -> Answered:
    """Close crew *name*'s open decision *key* with *text*; with *send*, also type the answer
    line into its pane (then Enter). The pane is checked before anything is recorded, so a
    refusal records nothing; typing that fails after the answer was recorded is reported in
    :attr:`Answered.unsent`."""
    pane = tmux = None
    if send:
        member, tmux = typable(home, backend, crewmod.validate_name(name),
                               "the answer was not recorded and nothing was typed")
        pane = member.pane
    decision = crewmod.answer(home, name, key, text)
    if pane is None or tmux is None or tmux.send(pane, crewmod.answer_line(decision.key, text)):
        return Answered(decision, pane)
    return Answered(decision, pane, tmux.last_error or "tmux failed")


@attrs.frozen
class Stopped:
    name: str
    pane: str
    #: Whether a pane was there to end.
    killed: bool
    #: Where its last screen and scrollback were kept, if they could be read.
    pane_log: str | None
    #: What is worth saying about the crew's registration on its host (a crew of another host).
    note: str | None = None


def stop(home: Home, backend: Panes, name: str) -> Stopped:
    """Keep the crew's last screen, end its pane (its window closes with it) and unregister it;
    its status log, turn-end marker and pane log stay (until a crew of that name is added). A
    pane that runs another program than the crew's is left alone, and the crew registered. A
    crew of another host is unregistered there too (:func:`firstmate.app.crewremote.left`)."""
    from firstmate.app.crewspawn import remove_launch_dir

    undone = f"crew {name!r} is still registered"
    member, verdict, tmux = current(
        home, backend, crewmod.get(home, name), undone, "fix tmux (FM_TMUX, FM_TMUX_SOCKET), or "
        f"drop the crew and its logs with fm crew remove {name}")
    if verdict.replaced:
        raise refusal(member, verdict, f"nothing was ended and {undone}")
    saved = None
    killed = False
    if verdict.state in (LIVE, DEAD):
        screen = tmux.history(member.pane)
        if screen is not None:
            saved = str(crewmod.save_pane_log(home, name, screen))
        killed = tmux.kill_pane(member.pane)
        if not killed and tmux.pane_state(member.pane) in (LIVE, DEAD):
            raise FirstmateError(f"cannot end crew {name!r}'s pane {member.shown}: "
                                 f"{tmux.last_error}; it is still registered")
    crewmod.unregister(home, name)
    remove_launch_dir(home, name)
    note = None
    if member.host is not None and isinstance(backend, CrewPanes):
        from firstmate.app.crewremote import left

        note = left(home, backend.env, member)
    return Stopped(name, member.pane, killed, saved, note)


def pane_states(home: Home, backend: Panes, members: tuple[crewmod.Crew, ...], *,
                bind: bool = True) -> tuple[tuple[crewmod.Crew, str], ...]:
    """Each crew (bound now when it was registered by a position, with *bind*) and the state of
    its pane, from one tmux call per server (this machine's and each host's, made together):
    ``live``, ``dead``, ``gone`` (no such pane, or not the crew's), ``unknown`` (tmux could not
    be asked), ``unreachable`` (its host could not be reached or read) or ``remote`` (a crew of
    another host whose panes fm does not read: it has no SSH settings here)."""
    if isinstance(backend, CrewPanes):
        hosts: list[str | None] = [None] if any(m.host is None for m in members) else []
        readable = set()
        for host in sorted({m.host for m in members if m.host is not None}):
            try:
                backend.host(host)
            except FirstmateError:
                continue  # (no SSH settings, or none that verify: its crews are "remote")
            readable.add(host)
            hosts.append(host)
        looked = backend.listings(hosts)
        listings = {host: found.listing for host, found in looked.items()}
        readers = {host: start_reader(backend.local if host is None else backend.host(host),
                                      listings[host]) for host in hosts}
    else:
        readable = set()
        listings = {None: backend.listing() if members else PaneListing()}
        readers = {None: start_reader(backend)}
    found = []
    for member in members:
        if member.host is not None and member.host not in readable:
            found.append((member, REMOTE))  # (its host's panes are not read from here)
            continue
        listing = listings.get(member.host)
        if listing is None:
            found.append((member, UNKNOWN if member.host is None else UNREACHABLE))
            continue
        fact = fact_of(listing, member)
        if member.host is None and bind and not member.bound:
            member = bind_position(home, member, fact, members)
        if not member.bound and fact is not None and holder(members, fact.pane, member.name):
            found.append((member, GONE))  # (its position names another crew's pane)
            continue
        found.append((member, judge(member, fact, readers[member.host]).state))
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
    #: more), ``unknown`` (tmux could not say), ``unreachable`` (its host could not be reached)
    #: or ``remote`` (a crew of another host whose panes are not read, docs/fleet-remote.md).
    pane_state: str
    last_text: str | None
    last_at: float | None
    open_decisions: int
    #: The target the crew was added with, when it is not :attr:`pane`.
    label: str | None = None
    #: The fleet host its pane is on (None: this machine).
    host: str | None = None

    @property
    def shown(self) -> str:
        pane = self.pane if self.host is None else f"{self.host}:{self.pane}"
        return pane if self.label is None else f"{pane} [{self.label}]"

    def age(self, now: float) -> float | None:
        """Seconds since the last status line, when it carries its stamp."""
        return None if self.last_at is None else max(0.0, now - self.last_at)

    def as_json(self, now: float) -> dict[str, object]:
        age = self.age(now)
        last = None if self.last_text is None else {
            "at": self.last_at, "text": self.last_text,
            "age_seconds": None if age is None else round(age, 1)}
        return {"name": self.name, "pane": self.pane, "host": self.host, "label": self.label,
                "added_at": self.added_at, "harness": self.harness,
                "pane_state": self.pane_state, "last_status": last,
                "open_decisions": self.open_decisions}


def rows(home: Home, backend: Panes) -> list[CrewRow]:
    """Every registered crew, by name, with one tmux call per server for all their panes."""
    found = []
    for member, state in pane_states(home, backend, crewmod.list(home)):
        last = crewmod.last_line(home, member.name)
        found.append(CrewRow(
            name=member.name, pane=member.pane, added_at=member.added_at,
            harness=crewmod.harness(home, member.name), pane_state=state,
            last_text=None if last is None else crewmod.clean_text(last.text),
            last_at=None if last is None else last.at,
            open_decisions=len(crewmod.open_decisions(home, member.name)), label=member.label,
            host=member.host))
    return found


def age_text(seconds: float | None) -> str:
    """``42s``, ``7m``, ``3h``, ``2d``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


__all__ = ["MAX_STEER_BYTES", "REMOTE", "Answered", "CrewRow", "Panes", "Steered", "Stopped",
           "age_text", "answer", "current", "pane_states", "refusal", "route", "rows", "steer",
           "stop", "typable"]
