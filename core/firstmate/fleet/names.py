"""The fleet's names: fleets, hosts, subjects, message ids and remote crews' names on the primary.

A remote crew ``C`` of host ``H`` is the primary's crew ``H.C``; its registration there names
its pane on host H and carries a ``host H`` line (:mod:`firstmate.fast.crewlog`), so the stale
source and the crew commands ask H's tmux about it, never the local one.
"""

from __future__ import annotations

import re

from firstmate.base.errors import UsageError

#: Fleet and host names: one NATS subject token each (no ``.``, ``*``, ``>`` or blanks).
TOKEN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
#: The pane of a host's crew whose pane the primary has not heard of yet.
UNKNOWN_PANE = "-"
#: The JetStream durable consumer the relay reads through.
CONSUMER = "relay"
#: What a message carries: the kinds of event, in the order a crew's pump sends them.
KINDS = ("crew", "status", "turn")
HELLO = "hello"
#: Crew names (as :data:`firstmate.store.crew.NAME_RE`; repeated here so the forwarder and the
#: relay check what arrives without importing the store's registry).
CREW_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")


def token(value: str, what: str) -> str:
    if not TOKEN_RE.fullmatch(value or ""):
        raise UsageError(f"invalid {what} name {value!r}: use 1-32 characters from A-Z a-z 0-9 "
                         "_ -, starting with a letter or digit")
    return value


def subject(fleet: str, host: str, kind: str) -> str:
    return f"fm.{fleet}.{host}.{kind}"


def subjects(fleet: str) -> str:
    """Every subject of the fleet (the stream's)."""
    return f"fm.{fleet}.>"


def host_subjects(fleet: str, host: str) -> str:
    """What host *host* may publish to (its NATS permissions)."""
    return f"fm.{fleet}.{host}.>"


def inbox_prefix(fleet: str, host: str) -> str:
    """The only subjects host *host* may subscribe to: its own replies (JetStream's acks)."""
    return f"_FM_INBOX.{fleet}.{host}"


def stream(fleet: str) -> str:
    return f"FM_{fleet}"


def parse_subject(fleet: str, text: str) -> tuple[str, str] | None:
    """``(host, kind)`` of a subject of *fleet*, None when it is not one."""
    parts = text.split(".")
    if len(parts) != 4 or parts[0] != "fm" or parts[1] != fleet:
        return None
    if not TOKEN_RE.fullmatch(parts[2]) or parts[3] not in (*KINDS, HELLO):
        return None
    return parts[2], parts[3]


def msg_id(host: str, epoch: str, kind: str, crew: str, n: int) -> str:
    """The message id (``Nats-Msg-Id``): one per event, the same every time it is sent."""
    return f"{host}/{epoch}/{kind}/{crew}/{n}"


def primary_name(host: str, crew: str) -> str | None:
    """The primary's name for crew *crew* of host *host*, None when it would be too long."""
    name = f"{host}.{crew}"
    return name if CREW_RE.fullmatch(name) else None


__all__ = ["CONSUMER", "CREW_RE", "HELLO", "KINDS", "TOKEN_RE", "UNKNOWN_PANE", "host_subjects",
           "inbox_prefix", "msg_id", "parse_subject", "primary_name", "stream", "subject",
           "subjects", "token"]
