"""One table of fm's own in a TOML file (``[mcp_servers.firstmate]``), written and taken out
as text so everything else in the file keeps its bytes: comments, order, quoting, spacing.

The standard library reads TOML but does not write it, and a TOML file cannot be rewritten
from its parsed form without losing the user's comments and layout. So fm only ever appends
its table as a block of its own (``[<key>.<name>]`` with string and string-list values),
replaces that block in place, or cuts it out; and every edit is checked by parsing the result
(``tomllib``): the file must mean exactly what it meant before, plus or minus our table. An
edit that would mean anything else (our table written with dotted keys or an inline table,
sub-tables of it, a ``[<key>.<name>]`` line inside a multi-line string) is refused with a
:class:`~firstmate.plugin.textblocks.ShapeError`, and nothing is written.
"""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Callable, Mapping
from typing import Any

from firstmate.plugin.textblocks import ShapeError

#: A line that opens a table or an array of tables.
_HEADER = re.compile(r"[ \t]*\[")


def parse(text: str) -> dict[str, Any]:
    """The TOML document *text*; a ShapeError when it is not TOML."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ShapeError(f"it is not valid TOML ({exc})") from exc
    except RecursionError as exc:
        raise ShapeError("it is nested too deeply to parse") from exc


def _string(value: str) -> str:
    """*value* as a TOML basic string: quote, backslash and control characters escaped."""
    out = ['"']
    for char in value:
        code = ord(char)
        if 0xD800 <= code <= 0xDFFF:
            raise ShapeError(f"the value {value!r} is not Unicode text")
        if char in '"\\':
            out.append("\\" + char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return "[" + ", ".join(_string(item) for item in value) + "]"
    raise ShapeError(f"fm writes strings, booleans and lists of strings, not {value!r}")


def render(key: str, name: str, body: Mapping[str, Any]) -> str:
    """Our table as TOML text: its header, then one ``key = value`` line per entry."""
    lines = [f"[{key}.{name}]"]
    lines += [f"{field} = {_value(value)}" for field, value in body.items()]
    return "\n".join(lines) + "\n"


def _header(key: str, name: str) -> re.Pattern[str]:
    part = r'[ \t]*(?:{0}|"{0}")[ \t]*'
    return re.compile(r"[ \t]*\[" + part.format(re.escape(key)) + r"\." +
                      part.format(re.escape(name)) + r"\][ \t]*(?:#.*)?")


def _span(lines: list[str], key: str, name: str) -> tuple[int, int] | None:
    """The lines of our table's block, if there is exactly one: its header and its values, up
    to the next header, less the blank and comment lines just before that header (they belong
    to what follows)."""
    header = _header(key, name)
    starts = [i for i, line in enumerate(lines) if header.fullmatch(line.rstrip("\r\n"))]
    if len(starts) != 1:
        return None
    start = starts[0]
    end = next((i for i in range(start + 1, len(lines)) if _HEADER.match(lines[i])), len(lines))
    while end > start + 1 and (not lines[end - 1].strip() or
                               lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return start, end


def _without(doc: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    servers = doc.get(key)
    if isinstance(servers, dict):
        servers.pop(name, None)
        if not servers:
            del doc[key]
    return doc


def _checked(text: str, result: str, key: str, name: str,
             wanted: Mapping[str, Any] | None) -> str:
    """*result* when it means what *text* meant with our table set to *wanted* (None: gone);
    else a ShapeError: fm writes nothing it has not proven."""
    before, after = parse(text), parse(result)
    table = after.get(key, {}).get(name) if isinstance(after.get(key), dict) else None
    same_rest = _without(after, key, name) == _without(before, key, name)
    if same_rest and table == (dict(wanted) if wanted is not None else None):
        return result
    raise ShapeError(f"its [{key}.{name}] table is not written as one block fm can edit "
                     f"safely; edit or remove [{key}.{name}] by hand")


def upsert(text: str, key: str, name: str, body: Mapping[str, Any],
           owned: Callable[[object], bool]) -> str:
    """*text* with our table ``[<key>.<name>]`` holding exactly *body*: unchanged when it
    already does, replaced in place when it is ours (*owned*), appended when absent."""
    doc = parse(text)
    servers = doc.get(key, {})
    if not isinstance(servers, dict):
        raise ShapeError(f"its {key!r} is not a table")
    if name in servers:
        if not owned(servers[name]):
            raise ShapeError(f"its {key}.{name} is a server of your own, not fm mcp; rename it")
        if servers[name] == dict(body):
            return text
        lines = text.splitlines(keepends=True)
        span = _span(lines, key, name)
        if span is None:
            return _checked(text, text, key, name, body)  # (refused: not one block)
        start, end = span
        result = "".join(lines[:start]) + render(key, name, body) + "".join(lines[end:])
        return _checked(text, result, key, name, body)
    gap = "" if not text.strip() else ("\n" if text.endswith("\n") else "\n\n")
    return _checked(text, text + gap + render(key, name, body), key, name, body)


def remove(text: str, key: str, name: str, owned: Callable[[object], bool]) -> str:
    """*text* without our table (and the blank line fm put before it); unchanged when the
    table is absent or the user's own."""
    try:
        doc = parse(text)
    except ShapeError:
        return text
    servers = doc.get(key)
    if not isinstance(servers, dict) or not owned(servers.get(name)):
        return text
    lines = text.splitlines(keepends=True)
    span = _span(lines, key, name)
    if span is None:
        return _checked(text, text, key, name, None)
    start, end = span
    head, rest = lines[:start], lines[end:]
    if head and not head[-1].strip() and (not rest or not rest[0].strip()):
        head = head[:-1]  # (the blank line that set our block apart)
    return _checked(text, "".join(head) + "".join(rest), key, name, None)


__all__ = ["parse", "remove", "render", "upsert"]
