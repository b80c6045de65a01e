"""The text of a delivered wake: operational input, wrapped and sanitised, the same in every harness.

A wake reaches the model as one block that says what happened (the reason lines, the core's own
mechanism-named ones followed by what they mean in plain words, :data:`PLAIN`), whether the
watcher could be restored (at most one typed ``watcher: FAILED - …`` line) and the one next step
(drain, handle, acknowledge; never arm by hand). Reason lines come from crews and checks, so they
are untrusted: :func:`sanitise` removes every control character and terminal escape sequence
before the text is handed to a harness.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from firstmate.base.wakeinput import FORMAT_CHARS

#: First characters of every wake text: harness shims and models recognise operational input.
PREFIX = "FIRSTMATE_OP:"
NEXT_STEP = (
    "Next step: run `fm wake drain`, handle the wake, then run the exact acknowledgement "
    "command it prints (WAKE_ACK_REQUIRED). Continuity is automatic: never arm the watcher "
    "by hand."
)
#: The next step when the harness has the firstmate MCP server (fm install registered it).
NEXT_STEP_TOOLS = (
    "Next step: call the firstmate MCP tool wake_drain (or run `fm wake drain`), handle the "
    "wake (crew_peek, crew_steer, crew_answer, crew_spawn, crew_stop), then call wake_ack with "
    "the `ack` it returned (or run the exact acknowledgement command it prints, "
    "WAKE_ACK_REQUIRED). Continuity is automatic: never arm the watcher by hand."
)
FAILURE_HINT = "If this failure repeats, run `fm status` and tell the captain."
#: The core's own reasons that name a mechanism, not what happened, with what they mean to the
#: model reading the wake: said after the reason on its line (the reason itself stays as it is,
#: the word the drain, the cycle log and the protocol use).
PLAIN = {
    "check: rearm-resurface": (
        "no watcher was running for a while (a harness session ended, or the watcher stopped "
        "or was stopped), so what was queued or left open meanwhile woke no one until now; "
        "the drain shows it"),
    "heartbeat": (
        "nothing woke you for a long while, so this is a routine look: check over the fleet "
        "and any crew that went quiet"),
}
#: Longest line kept (a reason line is at most this long in the delivery ledger too).
MAX_LINE = 4096

_SURROGATE = re.compile(r"[\ud800-\udfff]")
# Escape sequences, 7-bit and 8-bit forms. String-type sequences (OSC, DCS, SOS, PM, APC) run to
# their terminator (BEL or ST) or, when unterminated, to the end of the line.
_STRING_SEQ = re.compile(r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?")
_CSI = re.compile(r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?")
_ESC = re.compile(r"\x1b[\x20-\x2f]*[\x30-\x7e]?")
_NEWLINES = re.compile(r"\r\n?|[\u2028\u2029\x85]")
# C0 controls except newline, DEL, any C1 left over, and Unicode's format characters (bidi
# controls, zero-width characters: they can make a shown line read differently from its bytes),
# the same set as every other text fm shows (firstmate.base.wakeinput.FORMAT_CHARS).
_CONTROLS = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f" + FORMAT_CHARS + "]")


def sanitise(text: str) -> str:
    """*text* with escape sequences, control and format characters removed; newlines kept.

    Lone surrogates become U+FFFD, CR/CRLF and Unicode line separators become ``\\n``, a TAB
    becomes a space. The result has no character below U+0020 except ``\\n``, no ESC, no C1
    control, and always encodes as UTF-8. Idempotent.
    """
    text = _SURROGATE.sub("\ufffd", text)
    text = _STRING_SEQ.sub("", text)
    text = _CSI.sub("", text)
    text = _ESC.sub("", text)
    text = _NEWLINES.sub("\n", text)
    text = text.replace("\t", " ")
    return _CONTROLS.sub("", text)


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """:func:`sanitise`, then on one line (newlines become spaces), cut to *limit* characters."""
    return " ".join(sanitise(text).split("\n")).strip()[:limit]


def facts_only(line: str) -> str:
    """A failure line as a model may see it: the operator's advice clauses that name ``fm arm``
    (``…; replace it with fm arm --take-over``) are dropped, since a model is never to arm by
    hand; the facts before them stay."""
    parts = one_line(line).split("; ")
    kept = [parts[0], *(part for part in parts[1:] if "fm arm" not in part)]
    return "; ".join(kept)


def plain_words(line: str) -> str:
    """*line* (a sanitised reason), followed by what it means when it is one of :data:`PLAIN`."""
    said = PLAIN.get(line)
    return f"{line} ({said})" if said else line


def compose(reasons: Iterable[str], failure: str | None, harness: str = "",
            tools: bool = False) -> str:
    """The full wake text: the header, each reason line, the failure line (if any), the next
    step (*tools*: naming the firstmate MCP server's tools, for a harness that has them)."""
    lines = [one_line(r) for r in reasons]
    lines = [plain_words(line) for line in lines if line]
    who = f" ({one_line(harness, 80)})" if harness.strip() else ""
    what = "fleet wake" if lines else "watcher restoration failed"
    header = f"{PREFIX} {what}{who}"
    body = [header, *lines]
    if failure:
        body.append(facts_only(failure))
    body.append(NEXT_STEP_TOOLS if tools else NEXT_STEP)
    if failure:
        body.append(FAILURE_HINT)
    return sanitise("\n".join(body))


__all__ = ["FAILURE_HINT", "MAX_LINE", "NEXT_STEP", "NEXT_STEP_TOOLS", "PLAIN", "PREFIX", "compose",
           "facts_only", "one_line", "plain_words", "sanitise"]
