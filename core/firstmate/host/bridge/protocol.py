"""The bridge protocol's message shapes (docs/bridge.md): parse shim lines, encode bridge lines.

Nothing here decides anything: a line becomes a :class:`Message` or a :class:`BadLine`, and a
bridge message becomes one JSON line. Text fields are sanitised so a hostile payload can neither
forge a second line nor smuggle control sequences to the harness UI.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from firstmate.base.waketext import one_line

PROTOCOL = 1
#: Longest line either side may send (bytes, newline excluded).
MAX_LINE = 1 << 20
#: Shim → bridge message types.
SHIM_TYPES = ("hello", "session_start", "session_shutdown", "idle", "busy", "arm", "status",
              "delivered")
START_REASONS = ("startup", "reload", "new", "resume", "fork", "restart", "unknown")
SHUTDOWN_REASONS = ("quit", "reload", "new", "resume", "fork", "unknown")
_ID_MAX = 64


@attrs.frozen
class Message:
    """One well-formed shim message. Unknown fields are dropped; known ones are typed."""

    type: str
    id: str | None = None
    generation: int | None = None
    reason: str = "unknown"
    session: str = ""
    ok: bool = False
    detail: str = ""
    fields: Mapping[str, Any] = attrs.field(factory=dict, eq=False, hash=False)


@attrs.frozen
class BadLine:
    """A line the bridge cannot take; answered with one ``error``."""

    id: str | None
    message: str


def _request_id(value: object) -> str | None:
    if not isinstance(value, str) or not value or len(value) > _ID_MAX:
        return None
    return value if value.isprintable() else None


def _generation(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < 2**53 else None


def _text(value: object, limit: int = 300) -> str:
    return one_line(value, limit) if isinstance(value, str) else ""


def parse(line: bytes | str) -> Message | BadLine:
    """One shim line as a :class:`Message`, or a :class:`BadLine` saying what is wrong."""
    raw = line.encode("utf-8", "surrogateescape") if isinstance(line, str) else line
    if len(raw) > MAX_LINE:
        return BadLine(None, f"line longer than {MAX_LINE} bytes ignored")
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return BadLine(None, "line is not JSON; send one JSON object per line")
    except RecursionError:
        return BadLine(None, "line nests too deeply; send one flat JSON object per line")
    if not isinstance(body, dict):
        return BadLine(None, "line is not a JSON object; send one JSON object per line")
    ident = _request_id(body.get("id"))
    kind = body.get("type")
    if not isinstance(kind, str) or kind not in SHIM_TYPES:
        shown = one_line(kind, 40) if isinstance(kind, str) else type(kind).__name__
        return BadLine(ident, f"unknown message type {shown!r} (expected one of "
                              f"{', '.join(SHIM_TYPES)})")
    reason = _text(body.get("reason"), 40)
    allowed = SHUTDOWN_REASONS if kind == "session_shutdown" else START_REASONS
    return Message(
        type=kind,
        id=ident,
        generation=_generation(body.get("generation")),
        reason=reason if reason in allowed else "unknown",
        session=_text(body.get("session"), 200),
        ok=body.get("ok") is True,
        detail=_text(body.get("detail"), 600),
        fields=body,
    )


def encode(kind: str, **fields: object) -> bytes:
    """One bridge line: ``{"type": kind, ...}`` and a newline, ASCII-only JSON."""
    body = {"type": kind, **fields}
    return (json.dumps(body, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


__all__ = ["MAX_LINE", "PROTOCOL", "SHIM_TYPES", "SHUTDOWN_REASONS", "START_REASONS", "BadLine",
           "Message", "encode", "parse"]
