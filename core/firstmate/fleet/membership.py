"""A home on another host: ``fm fleet join`` and ``fm fleet leave``.

Joining checks the credentials for real before it keeps anything: it connects as the host and
publishes a ``hello`` the fleet's stream must acknowledge, which proves at once that the server
is reachable, takes these credentials, lets this host publish its subjects and has the fleet's
stream (the relay made it). Then it keeps the membership in the home's private fleet directory,
marks the home joined (``state/fleet/forward.lock``), starts the outbox at the end of every
crew's log and starts the forwarder.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping

import attrs

from firstmate.base.errors import FirstmateError, UsageError
from firstmate.base.safepaths import open_private
from firstmate.fleet import config, names, natsconn, paths, procs, wire
from firstmate.fleet.config import Member
from firstmate.fleet.outbox import Outbox, out_dir
from firstmate.store.home import Home

START_WAIT = 10.0


def join(home: Home, env: Mapping[str, str], *, url: str | None, creds: str | None,
         host: str | None) -> tuple[Member, int]:
    """Join this home to the fleet the credentials name; the member and the forwarder's pid."""
    root = os.fspath(home.root)
    data, where = config.read_creds(creds, env)
    member = Member.of(data, where)
    if host is not None and host != member.host:
        raise UsageError(f"{where} holds host {member.host}'s credentials, not {host}'s: ask the "
                         f"primary for this host's (fm fleet host add {host})")
    if url:
        member = attrs.evolve(member, urls=config.parse_urls(url))
    if config.load_primary(root, env) is not None:
        raise UsageError("this home is a fleet's primary; join from a home on the other host "
                         "(a home is a primary or a host, not both)")
    asyncio.run(_hello(member))
    before = config.load_member(root, env)
    if before is not None and (before.fleet, before.host) != (member.fleet, member.host):
        leave(home, env)  # (another fleet or name: its outbox does not carry over)
    procs.stop(home, paths.FORWARD_LOCK)
    config.save_member(root, env, member)
    paths.ensure(home)
    fd = open_private(paths.path(home, paths.FORWARD_LOCK), os.O_WRONLY | os.O_CREAT)
    os.close(fd)
    Outbox.open(home, member.fleet, member.host)
    procs.start(home, ["fleet", "forward"], env)
    if not procs.wait_for(lambda: procs.holder(home, paths.FORWARD_LOCK) is not None,
                          START_WAIT):
        raise FirstmateError(f"joined, but the forwarder did not start within {START_WAIT:g}s; "
                             f"see {paths.path(home, 'forward.log')} - the next crew report "
                             "starts it again")
    return member, procs.holder(home, paths.FORWARD_LOCK) or 0


async def _hello(member: Member) -> None:
    nc = await natsconn.connect(member.urls, member.auth, name=f"fm-join-{member.host}",
                                inbox_prefix=names.inbox_prefix(member.fleet, member.host),
                                once=True, fix="ask the primary for new ones: fm fleet host add "
                                               f"{member.host} --replace")
    try:
        event = wire.Event(member.fleet, member.host, "join", names.HELLO, "", time.time_ns(),
                           round(time.time(), 3))
        subject, body, headers = wire.encode(event, bytes.fromhex(member.key))
        try:
            await nc.jetstream().publish(subject, body, timeout=natsconn.PUBLISH_TIMEOUT * 2,
                                         stream=names.stream(member.fleet), headers=headers)
        except Exception as exc:
            text = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise FirstmateError(
                f"the server took the connection but not this host's first message ({text}): "
                "the primary's relay may not run (fm fleet status there), or these credentials "
                "are not this fleet's (ask for new ones: fm fleet host add "
                f"{member.host} --replace)") from None
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


def leave(home: Home, env: Mapping[str, str]) -> Member | None:
    """Stop the forwarder and forget the membership; reports stay local from now on."""
    procs.stop(home, paths.FORWARD_LOCK)
    root = os.fspath(home.root)
    member = config.load_member(root, env)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(paths.path(home, paths.FORWARD_LOCK))
    config.forget(root, env, config.MEMBER)
    config.remove_tree(out_dir(home))
    return member


__all__ = ["join", "leave"]
