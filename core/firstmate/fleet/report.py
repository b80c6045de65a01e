"""``fm fleet status``: what this home is in its fleet, and whether its processes run."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from firstmate.fleet import config, paths, procs
from firstmate.fleet.outbox import EPOCH, Outbox, out_dir
from firstmate.store.home import Home


def status(home: Home, env: Mapping[str, str]) -> dict[str, Any]:
    root = os.fspath(home.root)
    primary = config.load_primary(root, env)
    member = config.load_member(root, env)
    if primary is not None:
        return _primary(home, env, primary)
    if member is not None:
        return _member(home, member)
    return {"role": None}


def _primary(home: Home, env: Mapping[str, str], primary: config.Primary) -> dict[str, Any]:
    seen = _hosts_seen(home)
    hosts = []
    for entry in primary.hosts:
        row = seen.get(entry.name, {})
        hosts.append({"name": entry.name, "seen_at": row.get("seen_at"),
                      "events": row.get("events", 0), "refused": row.get("refused", 0),
                      "last_refusal": row.get("last_refusal"),
                      "creds": config.creds_path(os.fspath(home.root), env, entry.name),
                      "ssh": _ssh(home, env, entry)})
    strangers = sorted(set(seen) - {entry.name for entry in primary.hosts})
    return {"role": "primary", "fleet": primary.fleet, "mode": primary.mode,
            "urls": list(primary.urls), "join_urls": list(primary.public),
            "listen": primary.listen or None, "replicas": primary.replicas,
            "supervisor_pid": procs.holder(home, paths.RUN_LOCK),
            "relay_pid": procs.holder(home, paths.RELAY_LOCK), "hosts": hosts,
            "unknown_hosts": [{"name": name, **seen[name]} for name in strangers]}


def _ssh(home: Home, env: Mapping[str, str], entry: config.HostEntry) -> str | None:
    """How fm reaches the host's panes (``user@addr port P``), None when it does not; settings
    that do not verify say so."""
    from firstmate.base.errors import StateError
    from firstmate.fleet import sshhosts

    if entry.ssh is None:
        return None
    try:
        return sshhosts.opened(os.fspath(home.root), env, entry.name, entry.ssh).shown
    except StateError:
        return "not authenticated (fm fleet host add --ssh records them again)"


def _member(home: Home, member: config.Member) -> dict[str, Any]:
    backlog = None
    if os.path.exists(os.path.join(out_dir(home), EPOCH)):
        try:
            backlog = Outbox.open(home, member.fleet, member.host).backlog()
        except Exception:  # (a status that cannot read the outbox still says the rest)
            backlog = None
    return {"role": "host", "fleet": member.fleet, "host": member.host,
            "urls": list(member.urls),
            "forwarder_pid": procs.holder(home, paths.FORWARD_LOCK),
            "backlog_bytes": backlog}


def _hosts_seen(home: Home) -> dict[str, dict[str, Any]]:
    if not home.db.exists():
        return {}
    from firstmate.store.database import open_store

    store = open_store(home)
    try:
        with store.reading() as conn:
            rows = conn.execute("SELECT host, seen_at, events, refused, last_refusal FROM "
                                "fleet_hosts").fetchall()
    finally:
        store.close()
    return {str(r[0]): {"seen_at": r[1], "events": int(r[2]), "refused": int(r[3]),
                        "last_refusal": r[4]} for r in rows}


__all__ = ["status"]
