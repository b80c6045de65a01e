"""Which tmux a crew's pane is on: this machine's, or a fleet host's over SSH.

:class:`CrewPanes` hands each crew the backend of the server its pane is on — the local
:class:`~firstmate.watch.backends.tmux.TmuxBackend` for a crew of this machine, the host's
:class:`~firstmate.watch.backends.sshtmux.SshTmuxBackend` for a crew registered with
``host H`` (one per host, made on first need from the host's verified SSH settings) — and
lists several servers' panes at once (:meth:`CrewPanes.listings`: every call started, then
waited for together, so a host that does not answer costs its own timeout, not the others').
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from firstmate.base.errors import FirstmateError
from firstmate.fleet import sshhosts
from firstmate.store.crew import Crew
from firstmate.store.home import Home
from firstmate.watch.backends.panes import start_ticks
from firstmate.watch.backends.sshtmux import SshListing, SshTmuxBackend
from firstmate.watch.backends.tmux import Listing, PaneListing, TmuxBackend

__all__ = ["UNREACHABLE", "CrewPanes", "Looked", "start_reader"]

#: The pane state of a crew whose host cannot be reached (or read) now.
UNREACHABLE = "unreachable"


def start_reader(backend: object, listing: object = None) -> Callable[[int], int | None]:
    """How the start time of a pane's program is read for *backend*'s panes: from *listing*'s
    (a host's listing carries them), else the backend's own (a host's last call), else this
    machine's ``/proc``."""
    starts = getattr(listing, "starts", None)
    if isinstance(starts, dict):
        return starts.get
    own = getattr(backend, "start_of", None)
    return own if callable(own) else start_ticks


@attrs.frozen
class Looked:
    """One server's listing: the panes, or None with why it could not be read."""

    listing: PaneListing | None
    why: str = ""


@attrs.define(eq=False)
class CrewPanes:
    home: Home
    env: Mapping[str, str]
    local: TmuxBackend
    #: Longest any one call to a host may take (seconds; None: ``FM_SSH_TIMEOUT``).
    cap: float | None = None
    _remote: dict[str, SshTmuxBackend] = attrs.field(factory=dict, init=False)

    @classmethod
    def from_env(cls, home: Home, env: Mapping[str, str], *,
                 cap: float | None = None) -> CrewPanes:
        return cls(home, env, TmuxBackend.from_env(env), cap)

    def of(self, member: Crew) -> TmuxBackend:
        """The backend of the server *member*'s pane is on; refused in one line (a
        :class:`FirstmateError`) for a host fm cannot reach: no SSH settings, or settings that
        do not verify."""
        return self.local if member.host is None else self.host(member.host)

    def host(self, name: str) -> SshTmuxBackend:
        found = self._remote.get(name)
        if found is None:
            access = sshhosts.require(self.home, self.env, name)
            found = SshTmuxBackend.for_host(self.home, self.env, access, self.local)
            if self.cap is not None:
                found.timeout = min(found.timeout, self.cap)
            self._remote[name] = found
        return found

    def listings(self, hosts: Iterable[str | None]) -> dict[str | None, Looked]:
        """Each named server's panes (None: this machine's), from one call each, the calls run
        together."""
        wanted = list(dict.fromkeys(hosts))
        found: dict[str | None, Looked] = {}
        calls: dict[str | None, Listing] = {}
        for host in wanted:
            try:
                backend = self.local if host is None else self.host(host)
            except FirstmateError as exc:
                found[host] = Looked(None, exc.message)
                continue
            call = backend.start_signatures()
            if call is None:
                found[host] = Looked(None, backend.last_error or "tmux could not run")
            else:
                calls[host] = call
        _wait(list(calls.values()))
        for host, call in calls.items():
            listing = call.result()
            if isinstance(listing, PaneListing):
                found[host] = Looked(listing)
            else:
                why = call.unreachable if isinstance(call, SshListing) else \
                    (call.said.partition("\n")[0] or "tmux did not answer")
                found[host] = Looked(None, why)
        return {host: found[host] for host in wanted}


def _wait(calls: Sequence[Listing]) -> None:
    """Step every call until each is over (each ends by its own deadline)."""
    left = list(calls)
    while left:
        left = [call for call in left if not call.step()]
        fds = [fd for fd in (call.fileno() for call in left) if fd >= 0]
        if left and fds:
            select.select(fds, [], [], 0.25)
        elif left:
            time.sleep(0.01)
