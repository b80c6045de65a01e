"""What a wake row may hold: the kinds, and the one-line text hygiene of keys and payloads.

Plain functions, free of attrs and (for ordinary printable text) of :mod:`re`, because
``fm wake append`` validates its arguments on a path that must start fast. :mod:`firstmate.store.queue`
re-exports everything here.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re

KINDS = ("signal", "stale", "check", "heartbeat")
#: Longest stored payload, in characters, marker included.
PAYLOAD_MAX = 4096
#: Longest stored key, in characters, marker included.
KEY_MAX = 512
#: What a cut key or payload ends with.
TRUNCATION_MARKER = "...[truncated]"

_ESCAPES = (
    r"\x1b\[[0-?]*[ -/]*[@-~]"            # CSI … final byte (colours, cursor moves)
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC … BEL / ST (titles, hyperlinks)
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"       # DCS / SOS / PM / APC … ST
    r"|\x1b[ -/]*[0-~]?"                    # two-byte and nF escapes, or a lone ESC
    r"|\x9b[0-?]*[ -/]*[@-~]"               # 8-bit CSI
)
_BREAKS = r"[\t\n\v\f\r\x1c-\x1e\x85\u2028\u2029]"
#: Unicode's format characters (category Cf): the bidirectional embeddings, overrides, isolates
#: and marks, zero-width spaces and joiners, the soft hyphen, the byte-order mark, invisible
#: operators, interlinear annotations and tags. Invisible, some of them make a shown line read
#: differently from its bytes (U+202E turns the rest of a line around), so text from a crew
#: never shows them. (This and every later Unicode version; a test holds it to the running
#: Python's database.)
FORMAT_CHARS = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f"
)
_CONTROLS = r"[\x00-\x08\x0e-\x1b\x1f\x7f-\x9f" + FORMAT_CHARS + "]"
#: Lone surrogates: bytes that were not UTF-8 (argv decoded with surrogateescape) cannot be
#: stored or printed as text, so each becomes U+FFFD.
_SURROGATES = r"[\ud800-\udfff]"

_compiled: tuple[re.Pattern[str], ...] = ()


def _patterns() -> tuple[re.Pattern[str], ...]:
    global _compiled
    if not _compiled:
        import re

        _compiled = tuple(re.compile(p) for p in (_SURROGATES, _ESCAPES, _BREAKS, _CONTROLS))
    return _compiled


def clean(text: str, limit: int | None = None) -> str:
    """*text* made safe for one line: breaks become spaces, escapes, controls and format
    characters (:data:`FORMAT_CHARS`) are removed, undecodable bytes become U+FFFD. The one
    sanitiser of text from crews, rows and checks wherever fm shows it."""
    # Printable text holds nothing any pattern matches (they all need a control character,
    # ESC, a line or paragraph separator, a format character or a surrogate, none of them
    # printable), so ordinary
    # text, in any script, skips them and never loads re.
    if not text.isprintable():
        surrogates, escapes, breaks, controls = _patterns()
        text = surrogates.sub("\ufffd", text)
        text = controls.sub("", breaks.sub(" ", escapes.sub("", text)))
    if limit is not None and len(text) > limit:
        text = text[: limit - len(TRUNCATION_MARKER)] + TRUNCATION_MARKER
    return text


def validate(kind: str, key: str, payload: str) -> tuple[str, str, str]:
    """The cleaned ``(kind, key, payload)``, or :class:`~firstmate.base.errors.UsageError` (nothing
    is written)."""
    if kind not in KINDS:
        from firstmate.base.errors import UsageError

        raise UsageError(
            f"wake append: invalid wake kind {clean(kind)[:40]!r} (expected signal, stale, check or heartbeat)"
        )
    key = clean(key, KEY_MAX)
    if not key.strip():
        from firstmate.base.errors import UsageError

        raise UsageError("wake append: empty wake key; pass a non-empty KEY")
    return kind, key, clean(payload, PAYLOAD_MAX)


__all__ = ["FORMAT_CHARS", "KEY_MAX", "KINDS", "PAYLOAD_MAX", "TRUNCATION_MARKER", "clean", "validate"]
