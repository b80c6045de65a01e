"""Crews on another host of the home's fleet, started or registered from the primary over SSH.

``fm crew spawn NAME --host H …`` and ``fm crew add NAME --host H --pane TARGET`` run the same
command on host H — ``fm crew spawn`` / ``fm crew add`` of the fm there, in its project directory,
on its crews' tmux server (``fm fleet host add H --ssh … --remote-dir DIR --remote-fm CMD
--remote-tmux-socket S``) — through the host's SSH connection (:mod:`firstmate.fleet.sshhosts`).
So the crew is spawned (or registered) in the host's home exactly as a local one is, its
registration bound there to its pane, pid and start time, and it reports from there through the
fleet; the primary knows it as ``H.NAME``.

Before that, the host's home is made one of the fleet's hosts when it is not: ``fm fleet join``
there, with the host's credentials handed over on stdin (never on a command line). The task of a
spawn goes on stdin too. Then the primary waits (up to ``FM_REMOTE_WAIT`` seconds, 15) for the
crew's registration to arrive through the relay, so that what the command prints works at once.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence

import attrs

from firstmate.base.envnum import env_float
from firstmate.base.errors import FirstmateError, UsageError
from firstmate.fleet import config, names, sshhosts
from firstmate.fleet.sshhosts import SshHost
from firstmate.store import crew as crewmod
from firstmate.store.home import Home

__all__ = ["DEFAULT_WAIT", "Remote", "add", "joined", "left", "spawn"]

DEFAULT_WAIT = 15.0
#: Seconds a remote spawn may take (a harness may start slowly; the crew is registered first).
SPAWN_LIMIT = 180.0


@attrs.frozen
class Remote:
    """A crew started or registered on a host: its name here, its pane there, what the host's
    fm said, and whether its registration reached this home in time."""

    name: str
    host: str
    pane: str
    said: tuple[str, ...]
    registered: bool
    notes: tuple[str, ...] = ()


def _clean(text: str) -> tuple[str, ...]:
    """What a host printed, line by line, with nothing a terminal would act on."""
    return tuple("".join(c if c.isprintable() else "?" for c in line)[:400]
                 for line in text.splitlines() if line.strip())


def _fail(access: SshHost, ran: sshhosts.Ran, undone: str) -> FirstmateError:
    if not ran.reached:
        return FirstmateError(f"cannot reach host {access.host} over SSH ({ran.why}); {undone} "
                              f"- check its SSH settings (fm fleet host add {access.host} --ssh "
                              "…) and that the host is up")
    said = [line for line in _clean(ran.why) if line] or [f"exit status {ran.status}"]
    if ran.status in (126, 127):
        return FirstmateError(f"host {access.host} has no fm at {access.fm!r} ({said[-1]}); "
                              f"{undone} - give it with fm fleet host add {access.host} --ssh "
                              f"{access.dest} --remote-fm /path/to/fm")
    return FirstmateError(f"on host {access.host}: {said[-1]}; {undone}")


def joined(home: Home, env: Mapping[str, str], access: SshHost) -> str | None:
    """Make the host's home one of this fleet's hosts when it is not (``fm fleet join`` there,
    its credentials on stdin); a note when it joined now, None when it already was."""
    primary = config.load_primary(os.fspath(home.root), env)
    entry = None if primary is None else primary.host(access.host)
    if primary is None or entry is None:
        raise UsageError(f"host {access.host} is not in this home's fleet: fm fleet host add "
                         f"{access.host} --ssh {access.dest} first")
    undone = "nothing was started there"
    ran = sshhosts.run(home, env, access, access.fm_words("fleet", "status", "--json"))
    if not ran.ok:
        raise _fail(access, ran, undone)
    try:
        state = json.loads(ran.out)
    except ValueError:
        state = None
    if not isinstance(state, dict):
        raise FirstmateError(f"fm on host {access.host} did not describe its fleet (fm fleet "
                             f"status --json printed {ran.out[:60]!r}); {undone}")
    if state.get("role") == "host" and state.get("fleet") == primary.fleet \
            and state.get("host") == access.host:
        return None
    if state.get("role") == "primary":
        raise FirstmateError(f"the home fm uses on host {access.host} is a fleet's primary, not "
                             f"one of its hosts; {undone} - give the host another directory "
                             f"(fm fleet host add {access.host} --ssh {access.dest} "
                             "--remote-dir DIR)")
    creds = json.dumps(config.issue(primary, entry).to_json()).encode()
    ran = sshhosts.run(home, env, access, access.fm_words(
        "fleet", "join", "--creds", "-", "--host", access.host), stdin=creds,
        limit=max(60.0, sshhosts.timeout(env)))
    if not ran.ok:
        raise _fail(access, ran, f"its home did not join fleet {primary.fleet} and {undone}")
    return f"host {access.host}'s home joined fleet {primary.fleet} (fm fleet join there)"


def _target(home: Home, host: str, name: str) -> str:
    crewmod.validate_name(name)
    full = names.primary_name(host, name)
    if full is None:
        raise UsageError(f"crew name {host}.{name} would be over 64 characters: give the crew a "
                         "shorter name")
    if crewmod.exists(home, full) and crewmod.get(home, full).host != host:
        raise UsageError(f"{full} is a crew of this home; name the crew on host {host} "
                         "otherwise")
    return full


def _registered(home: Home, env: Mapping[str, str], full: str, host: str,
                pane: str | None) -> bool:
    """Wait for the relay to register crew *full* of *host* (on *pane* when it is known)."""
    deadline = time.monotonic() + env_float(env, "FM_REMOTE_WAIT", DEFAULT_WAIT,
                                            allow_zero=True)
    while True:
        try:
            member = crewmod.get(home, full)
            if member.host == host and (pane is None or member.pane == pane):
                return True
        except UsageError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _pane(said: Sequence[str], verb: str) -> str | None:
    """The pane id the host's fm named in its ``crew: <verb> …`` line."""
    for line in said:
        if line.startswith(f"crew: {verb}") and " pane %" in line:
            word = line.split(" pane ", 1)[1].split()[0].rstrip(",)")
            if crewmod.is_pane_id(word):
                return word
    return None


def spawn(home: Home, env: Mapping[str, str], host: str, name: str, options: Sequence[str],
          task: str) -> Remote:
    """``fm crew spawn NAME OPTIONS…`` on *host*, the task on stdin."""
    access = sshhosts.require(home, env, host)
    full = _target(home, host, name)
    notes = [note for note in (joined(home, env, access),) if note]
    ran = sshhosts.run(home, env, access,
                       access.fm_words("crew", "spawn", name, *options, "--prompt-file", "-"),
                       stdin=task.encode("utf-8", "replace"),
                       limit=max(SPAWN_LIMIT, sshhosts.timeout(env)))
    if not ran.ok:
        raise _fail(access, ran, "no crew was started")
    said = _clean(ran.out)
    pane = _pane(said, "spawned")
    return Remote(full, host, pane or "?", said, _registered(home, env, full, host, pane),
                  tuple(notes))


def add(home: Home, env: Mapping[str, str], host: str, name: str, target: str, *,
        replace: bool) -> Remote:
    """``fm crew add NAME --pane TARGET`` on *host*: its pane there, bound there."""
    access = sshhosts.require(home, env, host)
    full = _target(home, host, name)
    notes = [note for note in (joined(home, env, access),) if note]
    words = ["crew", "add", name, "--pane", target, *(["--replace"] if replace else [])]
    ran = sshhosts.run(home, env, access, access.fm_words(*words))
    if not ran.ok:
        raise _fail(access, ran, "no crew was registered")
    said = _clean(ran.out)
    notes += [line for line in _clean(ran.why) if line]
    pane = _pane(said, "added") or _pane(said, f"{name} now watches") or \
        _pane(said, f"{name} is already")
    return Remote(full, host, pane or target, said, _registered(home, env, full, host, pane),
                  tuple(notes))


def left(home: Home, env: Mapping[str, str], member: crewmod.Crew) -> str | None:
    """Unregister *member*, a crew of another host whose pane was just ended, on its host too
    (``fm crew stop`` there, which finds its pane gone); a note when that failed."""
    assert member.host is not None
    name = member.name[len(member.host) + 1:]
    try:
        access = sshhosts.require(home, env, member.host)
    except FirstmateError as exc:
        return exc.message
    ran = sshhosts.run(home, env, access, access.fm_words("crew", "stop", name))
    if ran.ok:
        return None
    why = (_clean(ran.why) or (f"exit status {ran.status}",))[-1]
    return (f"crew {name} is still registered on host {member.host} ({why}): run fm crew "
            f"remove {name} there")
