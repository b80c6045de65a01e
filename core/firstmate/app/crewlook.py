"""``fm crew peek`` and ``fm crew attach``: a crew's screen, read or joined, on the right server.

Both look only at the pane the crew is bound to, checked first as ``fm crew steer`` checks it
(:mod:`firstmate.app.crewops`): a pane that is gone or runs another program is refused in one
line naming the fix; a pane whose harness ended (kept by remain-on-exit) is the crew's last
screen and may be looked at. Every tmux call goes to the server ``FM_TMUX_SOCKET`` names (the
backend's), with every argument literal; for a crew of another host of the home's fleet, to that
host's tmux over its SSH connection, and attaching runs ``ssh -t`` to it.

**Attaching.** The crew's window and pane are selected, then the terminal is handed over:

* inside tmux on that same server (``$TMUX`` names its socket): ``switch-client`` moves this
  client to the crew's pane;
* otherwise ``attach-session`` opens a client in this terminal (a terminal is needed); inside
  another tmux server that client is nested, started without ``TMUX`` as tmux asks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

from firstmate.app.crewops import Panes, current, refusal, route
from firstmate.base.errors import FirstmateError
from firstmate.store import crew as crewmod
from firstmate.store.home import Home
from firstmate.watch.backends import screen
from firstmate.watch.backends.sshtmux import SshTmuxBackend
from firstmate.watch.backends.tmux import DEAD, LIVE, UNKNOWN, TmuxBackend

__all__ = ["ATTACH", "DEFAULT_PEEK_LINES", "NESTED", "SWITCH", "Attach", "attach", "peek",
           "same_server"]

#: Lines ``fm crew peek`` shows unless told.
DEFAULT_PEEK_LINES = 20
#: How :class:`Attach` hands the terminal over.
SWITCH, ATTACH, NESTED = "switch", "attach", "nested"
_TMUX_ENV = ("TMUX", "TMUX_PANE")


def _looked_at(home: Home, backend: Panes, name: str,
               undone: str) -> tuple[crewmod.Crew, str, TmuxBackend]:
    """The crew *name*, its pane's state and the backend of its tmux, once the pane is checked
    to be its own, live or ended; else refused."""
    member, verdict, tmux = current(home, backend, crewmod.get(home, name), undone)
    if verdict.state not in (LIVE, DEAD):
        raise refusal(member, verdict, undone)
    return member, verdict.state, tmux


def peek(home: Home, backend: Panes, name: str,
         count: int = DEFAULT_PEEK_LINES) -> screen.Tail:
    """The last *count* lines of crew *name*'s screen (:func:`screen.tail`); refused in one line
    naming the fix when its pane is not its own, or tmux cannot be asked."""
    undone = "nothing was read"
    member = crewmod.get(home, name)
    if not member.bound:
        member = _looked_at(home, backend, name, undone)[0]  # (binds it, as steer would)
    tmux = route(backend, member, undone)
    shown = screen.tail(tmux, member, count)
    if shown.state == UNKNOWN:
        fix = "check FM_TMUX and FM_TMUX_SOCKET" if member.host is None else (
            f"check host {member.host}'s SSH access (fm fleet host add {member.host} --ssh …) "
            "and that tmux runs there")
        raise FirstmateError(f"cannot ask tmux about pane {member.shown}: {shown.why}; {undone} "
                             f"- {fix}")
    if not shown.read:
        raise refusal(member, shown.verdict(), undone)
    return shown


@attrs.frozen
class Attach:
    """How to bring crew :attr:`name`'s pane to this terminal: :attr:`argv` (one tmux call on
    the crew's server) run with :attr:`env`."""

    name: str
    pane: str
    #: :data:`LIVE`, or :data:`DEAD` (its harness ended: its last screen).
    state: str
    #: :data:`SWITCH`, :data:`ATTACH` or :data:`NESTED`.
    how: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    #: The fleet host whose tmux the pane is on (None: this machine's): reached by ``ssh -t``.
    host: str | None = None

    @property
    def takes_terminal(self) -> bool:
        """The call runs a tmux client in this terminal until it detaches."""
        return self.how != SWITCH

    def notes(self) -> tuple[str, ...]:
        """The lines worth saying before the terminal is handed over."""
        found = []
        if self.state == DEAD:
            found.append(f"crew: note: the harness in {self.name}'s pane {self.pane} has ended; "
                         "its last screen is kept")
        if self.host is not None:
            found.append(f"crew: note: attaching to host {self.host}'s tmux over ssh; detach "
                         "(your prefix key, then d) to come back")
        if self.how == NESTED:
            found.append("crew: note: this terminal is inside another tmux server; the crews' "
                         "server opens nested in it (the outer tmux takes its prefix key first)")
        return tuple(found)


def same_server(backend: TmuxBackend, pane: str, env: Mapping[str, str]) -> bool:
    """Whether this process runs inside tmux (``$TMUX``) on the server *backend* asks, the one
    that has *pane* (never a host's over SSH: its socket's path names a file there)."""
    inside = env.get("TMUX", "")
    if not inside or isinstance(backend, SshTmuxBackend):
        return False
    mine = inside.rsplit(",", 2)[0]
    theirs = backend.run("display-message", "-p", "-t", pane, "#{socket_path}")
    if not theirs or not mine:
        return False
    try:
        return os.path.samefile(mine, theirs.rstrip("\n"))
    except OSError:
        return False


def attach(home: Home, backend: Panes, name: str, env: Mapping[str, str], *,
           terminal: bool) -> Attach:
    """The way to bring crew *name*'s pane to this terminal (*terminal*: stdin is one), once
    the pane is checked to be the crew's; refused in one line naming the fix otherwise. For a
    crew of another host, the way is ``ssh -t`` to that host's tmux (``attach-session``)."""
    undone = "nothing was attached"
    member, shown, tmux = _looked_at(home, backend, name, undone)
    pane = member.pane
    select = (["select-window", "-t", pane], ["select-pane", "-t", pane])
    if same_server(tmux, pane, env):
        argv = tmux.sequence(*select, ["switch-client", "-t", pane])
        return Attach(member.name, pane, shown, SWITCH, tuple(argv), dict(env))
    if not terminal:
        raise FirstmateError(f"fm crew attach needs a terminal and stdin is not one; {undone} - "
                             f"run it in a terminal, or read the crew's screen with fm crew peek "
                             f"{member.name}")
    how = NESTED if env.get("TMUX") else ATTACH
    argv = tmux.sequence(*select, ["attach-session", "-t", pane])
    clean_env = {k: v for k, v in env.items() if k not in _TMUX_ENV}
    return Attach(member.name, pane, shown, how, tuple(argv), clean_env, member.host)
