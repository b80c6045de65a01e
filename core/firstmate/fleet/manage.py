"""The primary's fleet: ``fm fleet serve``, ``use``, ``host add``/``remove`` and ``stop``.

Both ways of making a home's fleet reachable end the same way: the configuration saved in the
home's private fleet directory (:mod:`firstmate.fleet.config`), the supervisor running (started,
or restarted when what it runs changed) and the relay consuming, which is waited for (up to
``FM_FLEET_START_TIMEOUT`` seconds, 20) so that what the command prints works at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping

import attrs

from firstmate.base.envnum import env_float
from firstmate.base.errors import ConflictError, FirstmateError, UsageError
from firstmate.fleet import config, names, natsconn, paths, procs, server, sshhosts
from firstmate.fleet.config import Auth, HostEntry, Primary
from firstmate.store.home import Home

START_TIMEOUT_ENV = "FM_FLEET_START_TIMEOUT"
DEFAULT_START_TIMEOUT = 20.0


def _root(home: Home) -> str:
    return os.fspath(home.root)


def not_a_member(home: Home, env: Mapping[str, str]) -> None:
    member = config.load_member(_root(home), env)
    if member is not None:
        raise UsageError(f"this home joined fleet {member.fleet} as host {member.host}: a home "
                         "is a fleet's primary or one of its hosts, not both (fm fleet leave "
                         "first)")


def require_primary(home: Home, env: Mapping[str, str]) -> Primary:
    primary = config.load_primary(_root(home), env)
    if primary is None:
        raise UsageError("this home serves no fleet: run fm fleet serve (or fm fleet use URL "
                         "--creds FILE) first")
    return primary


def _listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(
            c.isspace() for c in host):
        raise UsageError(f"invalid --listen {text!r}: give HOST:PORT, e.g. 127.0.0.1:4222")
    return host, int(port)


def serve(home: Home, env: Mapping[str, str], *, listen: str | None, fleet: str | None,
          url: str | None) -> Primary:
    """This home's fleet on a ``nats-server`` fm runs (JetStream, users and permissions)."""
    not_a_member(home, env)
    natsconn.load()  # (the relay needs the client: refused here, not in the background)
    existing = config.load_primary(_root(home), env)
    listen = listen or (existing.listen if existing is not None and existing.listen else
                        config.DEFAULT_LISTEN)
    host, port = _listen(listen)
    local = "127.0.0.1" if host in ("0.0.0.0", "::", "*") else host
    relay = existing.relay if existing is not None and existing.mode == "serve" else \
        Auth.fresh("fm-relay")
    name = fleet or (existing.fleet if existing is not None else config.new_fleet_name())
    if existing is not None and fleet is not None and fleet != existing.fleet:
        raise UsageError(f"this home's fleet is {existing.fleet}; hosts joined it by that name "
                         "(drop --fleet)")
    primary = Primary(names.token(name, "fleet"), "serve",
                      (f"nats://{local}:{port}",), relay, f"{host}:{port}", 1,
                      existing.hosts if existing is not None else (),
                      config.parse_urls(url) if url else
                      (existing.join_urls if existing is not None else ()))
    server.binary(env)  # (refused here, not in the background, when there is none)
    _activate(home, env, existing, primary)
    return primary


def use(home: Home, env: Mapping[str, str], *, url: str, creds: str | None,
        fleet: str | None, replicas: int) -> Primary:
    """This home's fleet on a NATS server of the user's own (with JetStream)."""
    not_a_member(home, env)
    if not 1 <= replicas <= 5:
        raise UsageError("--replicas must be 1 to 5 (the stream's copies in a cluster)")
    data, where = config.read_creds(creds, env)
    relay = Auth.of(data, where)
    existing = config.load_primary(_root(home), env)
    name = fleet or (existing.fleet if existing is not None else config.new_fleet_name())
    primary = Primary(names.token(name, "fleet"), "use", config.parse_urls(url), relay, "",
                      replicas, existing.hosts if existing is not None else ())
    asyncio.run(_probe(primary))
    _activate(home, env, existing, primary)
    return primary


async def _probe(primary: Primary) -> None:
    """Connect once as the relay: an unreachable server or refused credentials are said now."""
    nc = await natsconn.connect(primary.urls, primary.relay, name="fm-use", once=True,
                                fix="check the user and password (or token) in the file "
                                    "given to --creds")
    await nc.close()


def _activate(home: Home, env: Mapping[str, str], before: Primary | None,
              primary: Primary) -> None:
    root = _root(home)
    config.save_primary(root, env, primary)
    write_server_conf(home, env, primary)
    running = procs.holder(home, paths.RUN_LOCK)
    if running is not None and before is not None and _same_run(before, primary):
        os.kill(running, signal.SIGHUP)
    else:
        if running is not None:
            procs.stop(home, paths.RUN_LOCK)
        procs.start(home, ["fleet", "run"], env)
    wait_ready(home, env)


def _same_run(before: Primary, after: Primary) -> bool:
    keep = ("fleet", "mode", "urls", "relay", "listen", "replicas")
    return all(getattr(before, field) == getattr(after, field) for field in keep)


def wait_ready(home: Home, env: Mapping[str, str]) -> int:
    """The relay's pid once it consumes; :class:`FirstmateError` naming the logs otherwise."""
    deadline = env_float(env, START_TIMEOUT_ENV, DEFAULT_START_TIMEOUT)

    def ready() -> int | None:
        pid = procs.holder(home, paths.RELAY_LOCK)
        try:
            with open(paths.path(home, paths.RELAY_READY)) as fh:
                named = fh.read().strip()
        except OSError:
            return None
        return pid if pid is not None and named == str(pid) else None

    seen: list[int] = []

    def check() -> bool:
        pid = ready()
        if pid is not None:
            seen.append(pid)
        return pid is not None

    if not procs.wait_for(check, deadline):
        raise FirstmateError(f"the relay is not consuming after {deadline:g}s; see "
                             f"{paths.path(home, 'relay.log')} and "
                             f"{paths.path(home, 'run.log')} (fm fleet status)")
    return seen[-1]


def write_server_conf(home: Home, env: Mapping[str, str], primary: Primary) -> None:
    if primary.mode != "serve":
        return
    directory = config.ensure_dir(_root(home), env)
    state = paths.ensure(home)
    text = server.render(primary, listen=primary.listen, store_dir=os.path.join(state, paths.JS_DIR),
                         log_file=os.path.join(state, "server.log"))
    config.write_private(os.path.join(directory, config.SERVER_CONF), text.encode())


@attrs.frozen
class Issued:
    entry: HostEntry
    #: The credentials file written now (None: the host's were kept: only its SSH changed).
    creds: str | None
    #: On a fleet using the user's own server: the file with the user block that server needs.
    snippet: str | None
    join_url: str
    #: What the first contact over SSH found, when SSH settings were given.
    contact: sshhosts.Contact | None = None
    ssh: sshhosts.SshHost | None = None


def host_add(home: Home, env: Mapping[str, str], name: str, *, replace: bool,
             nats_creds: str | None, ssh: sshhosts.SshHost | None = None) -> Issued:
    """Add host *name* to the fleet (its credentials issued), or, for a host already added and
    *ssh* given without *replace*, record only how fm reaches its panes over SSH."""
    primary = require_primary(home, env)
    names.token(name, "host")
    existing = primary.host(name)
    root = _root(home)
    contact = None
    sealed = None
    if ssh is not None:
        contact = sshhosts.first_contact(home, env, ssh)
        sealed = sshhosts.sealed(root, env, ssh)
    if existing is not None and not replace:
        if ssh is None:
            raise ConflictError(f"host {name} is already in fleet {primary.fleet}; --replace "
                                "issues new credentials (the old ones stop working), --ssh "
                                "changes how fm reaches its panes")
        entry = attrs.evolve(existing, ssh=sealed)
        _keep_entry(home, env, primary, entry)
        return Issued(entry, None, None, ",".join(primary.public), contact, ssh)
    if nats_creds is not None:
        data, where = config.read_creds(nats_creds, env)
        auth = Auth.of(data, where)
    else:
        auth = Auth.fresh(f"fm-{primary.fleet}-{name}")
    kept = sealed if sealed is not None else (existing.ssh if existing is not None else None)
    entry = HostEntry(name, config.new_key(), auth, kept)
    primary = _keep_entry(home, env, primary, entry)
    creds = config.creds_path(root, env, name)
    config.write_private(creds, config.issue(primary, entry).to_json())
    snippet = None
    if primary.mode == "serve":
        write_server_conf(home, env, primary)
        _reload(home)
    else:
        snippet = creds[: -len(".creds")] + ".nats.conf"
        config.write_private(snippet, (server.user_block(entry, primary.fleet) + "\n").encode())
        _reload(home)
    return Issued(entry, creds, snippet, ",".join(primary.public), contact, ssh)


def _keep_entry(home: Home, env: Mapping[str, str], primary: Primary,
                entry: HostEntry) -> Primary:
    hosts = tuple(sorted([*(e for e in primary.hosts if e.name != entry.name), entry],
                         key=lambda e: e.name))
    primary = attrs.evolve(primary, hosts=hosts)
    config.save_primary(_root(home), env, primary)
    return primary


def host_remove(home: Home, env: Mapping[str, str], name: str) -> None:
    primary = require_primary(home, env)
    if primary.host(name) is None:
        raise UsageError(f"host {name} is not in fleet {primary.fleet} (fm fleet status lists "
                         "its hosts)")
    _close_ssh(home, env, [name])
    primary = attrs.evolve(primary, hosts=tuple(e for e in primary.hosts if e.name != name))
    root = _root(home)
    config.save_primary(root, env, primary)
    for path in (config.creds_path(root, env, name),
                 config.creds_path(root, env, name)[: -len(".creds")] + ".nats.conf"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    write_server_conf(home, env, primary)
    _reload(home)


def _close_ssh(home: Home, env: Mapping[str, str], hosts: list[str] | None) -> bool:
    """End the control masters of *hosts* (None: every host's); whether one was running."""
    closed = False
    for access in sshhosts.every(home, env):
        if hosts is None or access.host in hosts:
            closed = sshhosts.close(home, env, access) or closed
    return closed


def _reload(home: Home) -> None:
    pid = procs.holder(home, paths.RUN_LOCK)
    if pid is not None:
        os.kill(pid, signal.SIGHUP)


def stop(home: Home, env: Mapping[str, str], *, forget: bool) -> list[str]:
    """Stop this home's fleet processes (the supervisor and what it runs, or the forwarder);
    with *forget*, drop the fleet's configuration too. What was stopped or forgotten."""
    done = []
    if _close_ssh(home, env, None):
        done.append("SSH connections")
    if procs.stop(home, paths.RUN_LOCK) is not None:
        done.append("supervisor")
    if procs.stop(home, paths.FORWARD_LOCK) is not None:
        done.append("forwarder")
    if forget:
        root = _root(home)
        if config.forget(root, env, config.PRIMARY):
            done.append("the fleet's configuration")
        conf = os.path.join(config.fleet_dir(root, env), config.SERVER_CONF)
        if os.path.exists(conf):
            os.unlink(conf)
        config.remove_tree(os.path.join(config.fleet_dir(root, env), config.HOSTS))
    return done


__all__ = ["Issued", "host_add", "host_remove", "require_primary", "serve", "stop", "use",
           "wait_ready", "write_server_conf"]
