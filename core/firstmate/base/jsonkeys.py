"""The top-level keys of a JSON object, read without the ``json`` module (which imports ``re``:
a hook's quick gate cannot afford it on every turn).

Only the keys are decoded: values are skipped, strings and nesting respected. Anything this
reader is unsure of (invalid UTF-8, a key with an escape, malformed input) is None, and the
caller then decides as it does for unreadable stdin: by running the full hook.
"""

from __future__ import annotations

_SPACE = " \t\r\n"
_END = ",}] \t\r\n"


def _ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _SPACE:
        i += 1
    return i


def _string_end(text: str, i: int) -> int:
    """The index just past the string that opens at *i*; -1 when it never closes."""
    i += 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i + 1
        i += 1
    return -1


def _value_end(text: str, i: int) -> int:
    """The index just past the JSON value at *i*; -1 when it is malformed."""
    n = len(text)
    if i >= n:
        return -1
    if text[i] == '"':
        return _string_end(text, i)
    if text[i] in "{[":
        depth = 0
        while i < n:
            c = text[i]
            if c == '"':
                i = _string_end(text, i)
                if i < 0:
                    return -1
                continue
            if c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return -1
    start = i
    while i < n and text[i] not in _END:
        i += 1
    return i if i > start else -1


def top_level_keys(data: bytes) -> dict[str, None] | None:
    """The keys of the JSON object in *data* (as a dict, for ``in`` tests); None when *data* is
    not one this reader is sure of."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    i = _ws(text, 0)
    if i >= len(text) or text[i] != "{":
        return None
    keys: dict[str, None] = {}
    i = _ws(text, i + 1)
    if i < len(text) and text[i] == "}":
        return keys if _ws(text, i + 1) == len(text) else None
    while True:
        if i >= len(text) or text[i] != '"':
            return None
        end = _string_end(text, i)
        if end < 0 or "\\" in text[i:end]:
            return None
        key = text[i + 1:end - 1]
        i = _ws(text, end)
        if i >= len(text) or text[i] != ":":
            return None
        i = _value_end(text, _ws(text, i + 1))
        if i < 0:
            return None
        keys[key] = None
        i = _ws(text, i)
        if i < len(text) and text[i] == ",":
            i = _ws(text, i + 1)
            continue
        if i < len(text) and text[i] == "}":
            return keys if _ws(text, i + 1) == len(text) else None
        return None


__all__ = ["top_level_keys"]
