"""One fleet message: an event of a remote crew, its subject, id and signature.

Every message a host publishes carries, besides the ``Nats-Msg-Id`` JetStream deduplicates by,
an HMAC-SHA256 (``Fm-Sig``) over its subject, id and body under that host's own key, which
``fm fleet host add`` issued. The server's permissions already keep a host to its own subjects;
the signature is what the relay checks itself, so a message another host (or anyone else on a
server the fleet does not run) publishes in a host's name is refused even where the server's
permissions are looser than ours.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Callable, Mapping

import attrs

from firstmate.fleet import names

ID_HEADER = "Nats-Msg-Id"
SIG_HEADER = "Fm-Sig"
VERSION = 1
#: Longest body accepted (a status line is at most 2000 bytes of text, escaped in JSON).
MAX_BODY = 16384


class Refused(Exception):
    """A message the relay will not apply: *code* is a short reason, *host* whose it claims."""

    def __init__(self, code: str, host: str, detail: str = "") -> None:
        super().__init__(code, host, detail)
        self.code = code
        self.host = host
        self.detail = detail


@attrs.frozen
class Event:
    """One event of a remote crew (or a host's ``hello``): the ``n``-th of its *kind*."""

    fleet: str
    host: str
    #: The outbox's generation on the host (a fresh one starts every sequence at 1 again).
    epoch: str
    kind: str
    crew: str
    n: int
    at: float
    #: The status line (``status``), the crew's pane on the host (``crew``; "" once it left).
    text: str = ""

    @property
    def msg_id(self) -> str:
        return names.msg_id(self.host, self.epoch, self.kind, self.crew, self.n)

    @property
    def subject(self) -> str:
        return names.subject(self.fleet, self.host, self.kind)

    def body(self) -> bytes:
        data = {"v": VERSION, "fleet": self.fleet, "host": self.host, "epoch": self.epoch,
                "kind": self.kind, "crew": self.crew, "n": self.n, "at": self.at,
                "text": self.text}
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def signature(key: bytes, subject: str, msg_id: str, body: bytes) -> str:
    mac = hmac.new(key, subject.encode() + b"\n" + msg_id.encode() + b"\n", hashlib.sha256)
    mac.update(body)
    return mac.hexdigest()


def encode(event: Event, key: bytes) -> tuple[str, bytes, dict[str, str]]:
    """``(subject, body, headers)`` to publish *event* with."""
    body = event.body()
    headers = {ID_HEADER: event.msg_id,
               SIG_HEADER: signature(key, event.subject, event.msg_id, body)}
    return event.subject, body, headers


def decode(fleet: str, subject: str, headers: Mapping[str, str] | None, body: bytes,
           key_of: Callable[[str], bytes | None]) -> Event:
    """The event a message of *fleet* carries, checked; :class:`Refused` when it is not one
    the host named by its subject sent (*key_of* gives a host's key, None for a stranger)."""
    parsed = names.parse_subject(fleet, subject)
    if parsed is None:
        raise Refused("bad subject", "?", subject[:100])
    host, kind = parsed
    key = key_of(host)
    if key is None:
        raise Refused("unknown host", host)
    headers = headers or {}
    msg_id = headers.get(ID_HEADER, "")
    claimed = headers.get(SIG_HEADER, "")
    if len(body) > MAX_BODY:
        raise Refused("oversized message", host, f"{len(body)} bytes")
    if not isinstance(claimed, str) or not hmac.compare_digest(
            claimed, signature(key, subject, str(msg_id), body)):
        raise Refused("bad signature", host)
    try:
        data = json.loads(body)
    except ValueError:
        raise Refused("malformed message", host, "not JSON") from None
    event = _event(data, host)
    if event.fleet != fleet or event.host != host or event.kind != kind:
        raise Refused("forged message", host,
                      f"body names fleet {event.fleet!r}, host {event.host!r}, kind {event.kind!r}")
    if event.msg_id != msg_id:
        raise Refused("forged message", host, "the message id is not the event's")
    return event


def _event(data: object, host: str) -> Event:
    if not isinstance(data, dict) or data.get("v") != VERSION:
        raise Refused("malformed message", host, "not a version 1 fleet event")
    text = data.get("text", "")
    fields = (data.get("fleet"), data.get("host"), data.get("epoch"), data.get("kind"),
              data.get("crew"))
    n, at = data.get("n"), data.get("at")
    if not all(isinstance(value, str) for value in fields) or not isinstance(text, str) \
            or not isinstance(n, int) or isinstance(n, bool) or n < 0 \
            or not isinstance(at, int | float) or isinstance(at, bool) \
            or not math.isfinite(at) or at < 0:
        raise Refused("malformed message", host, "a field is missing or of the wrong type")
    fleet, claimed_host, epoch, kind, crew = (str(value) for value in fields)
    if not names.TOKEN_RE.fullmatch(epoch):
        raise Refused("malformed message", host, "bad epoch")
    if kind != names.HELLO and not names.CREW_RE.fullmatch(crew):
        raise Refused("malformed message", host, "bad crew name")
    return Event(fleet, claimed_host, epoch, kind, crew, n, float(at), text)


__all__ = ["ID_HEADER", "MAX_BODY", "SIG_HEADER", "Event", "Refused", "decode", "encode",
           "signature"]
