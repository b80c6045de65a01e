"""``fm doctor``'s look past the home: the tmux server the crews' panes live on, each crew's
pane, and, for a home in a fleet, the fleet's long-lived processes.

A wrong ``FM_TMUX_SOCKET`` makes every crew look ``gone``: asked of a server that does not run
(or holds none of their panes), tmux says nothing is there. So when no crew's pane is found,
the other tmux servers of this user (the sockets in tmux's own directory) are asked which one
holds them, and the fix names it. Panes are judged as everywhere else
(:mod:`firstmate.watch.backends.panes`: the pane id and its program's pid), and nothing is
bound, typed or ended: the doctor reads only.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from firstmate.app.doctorfinding import one_line

if TYPE_CHECKING:
    from firstmate.app.doctor import Doctor
    from firstmate.store import crew as crewmod
    from firstmate.watch.backends.tmux import TmuxBackend

#: Other tmux servers asked at most, looking for the crews' panes (the most recently used).
MAX_SERVERS = 64


def _server(backend: TmuxBackend) -> str:
    return f"tmux server {backend.socket!r} (FM_TMUX_SOCKET)" if backend.socket else \
        "the default tmux server"


def check_crews(doc: Doctor) -> None:
    """Is the tmux server reachable, and is each registered local crew's pane still its own?"""
    from firstmate.app.crewops import pane_states
    from firstmate.store import crew as crewmod
    from firstmate.watch.backends.tmux import DEAD, GONE, LIVE, UNKNOWN, TmuxBackend

    if not doc.home.state.is_dir():
        return
    members = tuple(m for m in crewmod.list(doc.home) if m.host is None)  # (this tmux's)
    if not members:
        return
    backend = TmuxBackend.from_env(doc.env)
    listing = backend.listing()
    states = () if listing is None else pane_states(doc.home, backend, members, bind=False)
    if listing is None or all(state == UNKNOWN for _, state in states):
        why = one_line(backend.last_error or "it did not answer", 200)
        doc.add("tmux", "fail", f"tmux cannot be asked ({why}), so no crew's pane can be read",
                _tmux_fix(doc, backend))
        return
    gone = [member for member, state in states if state == GONE]
    # (A running server always has a pane: an empty listing is no server at all.)
    if len(gone) == len(members) and _all_gone(doc, backend, members, running=bool(listing)):
        return
    live = sum(1 for _, state in states if state == LIVE)
    doc.add("tmux", "ok", f"{_server(backend)}: {live} of {len(members)} crew pane(s) live")
    for member, state in states:
        if state == GONE:
            doc.add("crews", "warn", f"crew {member.name}: its pane {member.pane} is gone (closed, "
                    "or now another program's); fm sends it nothing",
                    f"fm crew remove {shlex.quote(member.name)}")
        elif state == DEAD:
            doc.add("crews", "warn", f"crew {member.name}: its program in pane {member.pane} has "
                    "ended (the pane is kept to show its last screen)",
                    f"fm crew remove {shlex.quote(member.name)}")


def _tmux_fix(doc: Doctor, backend: TmuxBackend) -> str:
    """What makes tmux answer, when fm could not run it at all ("" when it ran and failed, or
    timed out: its own message is the cause then)."""
    if backend.last_exit is not None or not (backend.last_error or "").startswith("tmux binary"):
        return ""
    if doc.env.get("FM_TMUX", "").strip():
        return "unset FM_TMUX   # or set it to the path of the tmux program"
    return "install tmux (no program named tmux is on PATH)"


def _all_gone(doc: Doctor, backend: TmuxBackend, members: tuple[crewmod.Crew, ...], *,
              running: bool) -> bool:
    """No crew's pane is on the server fm asks: another server holding them, or a socket where
    no server runs, is the cause (reported; True). Otherwise the panes were closed (False: each
    crew is reported on its own)."""
    count = len(members)
    found = _holding_server(backend, members)
    if found is not None:
        named, fix = found
        said = ("the crew's pane is not on {}, so it shows gone; it is" if count == 1 else
                f"none of the {count} crews' panes is on {{}}, so every crew shows gone; they are")
        doc.add("tmux", "fail", said.format(_server(backend)) + f" on the tmux server {named}: "
                "set FM_TMUX_SOCKET in the environment fm and the harness start from", fix)
        return True
    if backend.socket and not running:
        said = ("its crew shows gone, and no other tmux server of yours holds its pane"
                if count == 1 else f"all {count} crews show gone, and no other tmux server of "
                "yours holds their panes")
        doc.add("tmux", "fail", f"no tmux server runs at {backend.socket!r} (FM_TMUX_SOCKET), so "
                f"{said}: FM_TMUX_SOCKET names the wrong server, or that server ended",
                "unset FM_TMUX_SOCKET   # or set it to the server your crews run on")
        return True
    return False


def _holding_server(backend: TmuxBackend,
                    members: tuple[crewmod.Crew, ...]) -> tuple[str, str] | None:
    """The other tmux server of this user on which the crews' panes are live (most of them), as
    ``(its name, the fix that points fm at it)``; None when there is none."""
    import stat

    import attrs

    from firstmate.watch.backends.panes import fact_of, judge
    from firstmate.watch.backends.tmux import LIVE

    directory = _socket_dir(backend)
    try:
        entries = [(entry.stat(follow_symlinks=False), entry.name)
                   for entry in os.scandir(directory)]
    except OSError:
        return None
    # The most recently used servers first (a socket's mtime moves as clients talk to it).
    sockets = [name for st, name in sorted(entries, key=lambda e: -e[0].st_mtime)
               if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid()][:MAX_SERVERS]
    mine = backend.socket if backend.socket and "/" in backend.socket else \
        os.path.join(directory, backend.socket or "default")
    best: tuple[int, str] | None = None
    for name in sockets:
        path = os.path.join(directory, name)
        if path == mine:
            continue
        listing = attrs.evolve(backend, socket=path).listing()
        if listing is None:
            continue
        # Only a pane whose program is the one the crew was bound to counts: pane ids repeat
        # across servers, a program's pid does not.
        held = sum(1 for m in members if m.bound and m.pid
                   and judge(m, fact_of(listing, m)).state == LIVE)
        if held and (best is None or held > best[0]):
            best = (held, name)
    if best is None:
        return None
    name = best[1]
    fix = "unset FM_TMUX_SOCKET" if name == "default" else \
        f"export FM_TMUX_SOCKET={shlex.quote(name)}"
    return repr(name), fix


def _socket_dir(backend: TmuxBackend) -> str:
    """Where this user's tmux servers keep their sockets (tmux's own rule)."""
    if backend.socket and "/" in backend.socket:
        return os.path.dirname(backend.socket)
    base = os.environ.get("TMUX_TMPDIR") or "/tmp"
    return os.path.join(base, f"tmux-{os.getuid()}")


# --- the fleet ---------------------------------------------------------------------------------


def check_fleet(doc: Doctor) -> None:
    """A home in a fleet (docs/fleet-remote.md): is the primary's supervisor and relay, or the
    host's forwarder, running (``fm fleet status`` in one line)?"""
    from firstmate.fleet import report

    if not doc.home.state.is_dir():
        return
    data = report.status(doc.home, doc.env)
    role = data.get("role")
    if role not in ("host", "primary"):
        return
    running = data.get("forwarder_pid") if role == "host" else data.get("supervisor_pid")
    if not running and _no_client(doc, data):
        return
    if role == "host":
        _host(doc, data)
    else:
        _primary(doc, data)


def _no_client(doc: Doctor, data: dict[str, object]) -> bool:
    """The fleet's processes are down because this fm has no NATS client to run them with (it
    was installed without the fleet extra): that is the cause, and installing it the fix,
    since starting them again only fails the same way (reported; True)."""
    import importlib.util

    if importlib.util.find_spec("nats") is not None:
        return False
    what = (f"host {data['host']} of fleet {data['fleet']}: its forwarder" if data["role"] == "host"
            else f"primary of fleet {data['fleet']}: its supervisor")
    doc.add("fleet", "fail", f"{what} is not running and cannot start: this fm has no NATS "
            f"client (nats-py), so nothing of this home reaches the fleet",
            _install_fleet_extra(doc.env))
    return True


def _install_fleet_extra(env: Mapping[str, str]) -> str:
    """The command installing the fleet extra's packages, by name, the way this fm was
    installed (pipx inject, uv tool, or its own pip: firstmate.plugin.installroute), since
    ``firstmate[fleet]`` would also install a firstmate over the one in use."""
    import re
    from importlib import metadata

    import attrs

    from firstmate.base.errors import FirstmateError
    from firstmate.plugin import installroute

    try:
        wanted = [req.split(";")[0].strip() for req in metadata.requires("firstmate") or ()
                  if re.search(r"extra\s*==\s*['\"]fleet['\"]", req)]
    except metadata.PackageNotFoundError:
        wanted = []
    if not wanted:
        return "pip install 'firstmate[fleet]'   # into the environment fm runs from"

    def name(spec: str) -> str:
        return re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0]

    try:
        route = installroute.detect(env=env)
    except FirstmateError:
        route = installroute.Route(installroute.PIP, Path(sys.prefix), sys.executable)
    if route.kind == installroute.UV_TOOL:
        route = attrs.evolve(route, requirements=(*route.requirements, *(
            installroute.Requirement(name(spec), spec) for spec in wanted[:-1])))
        return route.add(wanted[-1], name(wanted[-1])).shown()
    command = route.add(wanted[0], name(wanted[0]))
    return attrs.evolve(command, argv=(*command.argv, *wanted[1:])).shown()


def _host(doc: Doctor, data: dict[str, object]) -> None:
    what = f"host {data['host']} of fleet {data['fleet']}"
    if data.get("forwarder_pid"):
        doc.add("fleet", "ok", f"{what}: forwarder pid {data['forwarder_pid']}")
        return
    backlog = data.get("backlog_bytes")
    waiting = f"; {backlog} bytes of status wait to be sent" if backlog else ""

    def start() -> str:
        # As fm fleet join starts it (not a report's rate-limited start, which a forwarder
        # that failed a moment ago would skip): the fix is asked for, so it is made now.
        from firstmate.base.errors import FirstmateError
        from firstmate.fleet import paths, procs

        paths.ensure(doc.home)
        procs.start(doc.home, ["fleet", "forward"], doc.env)
        if not procs.wait_for(lambda: procs.holder(doc.home, paths.FORWARD_LOCK) is not None,
                              10.0):
            raise FirstmateError(f"the forwarder did not start; see "
                                 f"{paths.path(doc.home, 'forward.log')}")
        return f"started the forwarder (pid {procs.holder(doc.home, paths.FORWARD_LOCK)})"

    doc.add("fleet", "warn", f"{what}: the forwarder is not running, so this host's crew "
            f"reports do not reach the primary until the next report starts it{waiting}",
            "fm doctor --fix", start)


def _primary(doc: Doctor, data: dict[str, object]) -> None:
    from firstmate.app.doctorfinding import fm_action

    what = f"primary of fleet {data['fleet']}"
    if not data.get("supervisor_pid"):
        if data.get("mode") == "serve":
            doc.add("fleet", "fail", f"{what}: its supervisor is not running, so no host's "
                    "report is relayed (the served nats-server and the relay are down)",
                    "fm fleet serve", fm_action(["fleet", "serve"], doc.project, doc.env))
        else:
            urls = ",".join(str(url) for url in data.get("urls") or [])  # type: ignore[attr-defined]
            doc.add("fleet", "fail", f"{what}: its supervisor is not running, so no host's "
                    f"report is relayed", f"fm fleet use {shlex.quote(urls)} --creds FILE   "
                    "# FILE: the relay's credentials you gave it")
        return
    if not data.get("relay_pid"):
        log = Path(str(doc.home.state)) / "fleet" / "relay.log"
        doc.add("fleet", "warn", f"{what}: supervisor pid {data['supervisor_pid']} runs but the "
                f"relay does not (the supervisor restarts it; {log} says why it stopped)")
        return
    doc.add("fleet", "ok", f"{what}: supervisor pid {data['supervisor_pid']}, relay pid "
            f"{data['relay_pid']}")


__all__ = ["check_crews", "check_fleet"]
