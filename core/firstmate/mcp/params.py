"""A tool's arguments: declared once, as the input schema a harness shows its model and as the
checks every call passes before anything runs.

A call is checked whole before its tool runs, and refused in one line naming what was wrong
(:class:`~firstmate.base.errors.UsageError`, exit 2), as ``fm`` refuses a bad command line:
an argument the tool does not take, one it needs and did not get, a value of the wrong type,
a number out of range, and text no command line could carry (a NUL character, a lone
surrogate, more than one argument's worth of bytes). JSON ``null`` is an optional argument
left out. Values are shown in errors escaped and cut, so hostile text cannot forge lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from firstmate.base.errors import UsageError

#: The most bytes one text argument may hold: what Linux lets one command-line argument hold
#: (MAX_ARG_STRLEN), so a tool takes nothing its command could not.
MAX_TEXT_BYTES = 131072
#: The most items a list argument may hold.
MAX_ITEMS = 256
#: The kinds of argument, as JSON Schema names them (``strings``: a list of strings).
KINDS = ("string", "integer", "boolean", "strings")


@attrs.frozen
class Param:
    """One argument of a tool."""

    name: str
    kind: str = attrs.field(validator=attrs.validators.in_(KINDS))
    #: What it is, for the model (the schema's description).
    help: str
    required: bool = False
    #: The value an optional argument left out takes.
    default: Any = None
    minimum: int | None = None
    maximum: int | None = None

    def schema(self) -> dict[str, Any]:
        """This argument as a JSON Schema property."""
        if self.kind == "strings":
            found: dict[str, Any] = {"type": "array", "items": {"type": "string"},
                                     "maxItems": MAX_ITEMS}
        else:
            found = {"type": self.kind}
        found["description"] = self.help
        if self.minimum is not None:
            found["minimum"] = self.minimum
        if self.maximum is not None:
            found["maximum"] = self.maximum
        if self.default is not None:
            found["default"] = list(self.default) if isinstance(self.default, tuple) \
                else self.default
        return found


def input_schema(params: tuple[Param, ...]) -> dict[str, Any]:
    """The tool's input schema: an object of exactly these arguments."""
    return {"type": "object",
            "properties": {param.name: param.schema() for param in params},
            "required": [param.name for param in params if param.required],
            "additionalProperties": False}


def shown(value: object, limit: int = 40) -> str:
    """*value* as an error line may quote it: its repr, escaped and cut."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


_TYPE_NAMES = {bool: "true or false", int: "a number", float: "a number", str: "a string",
               list: "a list", dict: "an object", type(None): "null"}


def _what(value: object) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def read(tool: str, params: tuple[Param, ...], given: object) -> dict[str, Any]:
    """The arguments of one call of *tool*, checked (see the module docstring): every declared
    argument, the optional ones left out at their defaults."""
    fix = f"see {tool}'s input schema"
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise UsageError(f"{tool}: the arguments must be an object, not {_what(given)}; {fix}")
    known = {param.name: param for param in params}
    for key in given:
        if key not in known:
            takes = ", ".join(known) or "no arguments"
            raise UsageError(f"{tool}: unknown argument '{shown(key)}' ({tool} takes "
                             f"{takes}); {fix}")
    found: dict[str, Any] = {}
    for param in params:
        value = given.get(param.name)
        if value is None:
            if param.required:
                raise UsageError(f"{tool}: missing argument '{param.name}' ({param.help}); {fix}")
            found[param.name] = param.default
            continue
        found[param.name] = _checked(tool, param, value, fix)
    return found


def _checked(tool: str, param: Param, value: object, fix: str) -> Any:
    where = f"{tool}: argument '{param.name}'"
    if param.kind == "string":
        if not isinstance(value, str):
            raise UsageError(f"{where} must be a string, not {_what(value)}; {fix}")
        return _text(where, value)
    if param.kind == "boolean":
        if not isinstance(value, bool):
            raise UsageError(f"{where} must be true or false, not {_what(value)}; {fix}")
        return value
    if param.kind == "integer":
        return _number(where, param, value, fix)
    if not isinstance(value, list):
        raise UsageError(f"{where} must be a list of strings, not {_what(value)}; {fix}")
    if len(value) > MAX_ITEMS:
        raise UsageError(f"{where} holds {len(value)} items; at most {MAX_ITEMS}")
    items = []
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise UsageError(f"{where}[{index}] must be a string, not {_what(item)}; {fix}")
        items.append(_text(f"{where}[{index}]", item))
    return tuple(items)


def _number(where: str, param: Param, value: object, fix: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{where} must be a whole number, not {_what(value)} "
                         f"'{shown(value)}'; {fix}")
    low, high = param.minimum, param.maximum
    if (low is not None and value < low) or (high is not None and value > high):
        span = (f"{low} to {high}" if low is not None and high is not None else
                f"{low} or more" if low is not None else f"{high} or less")
        raise UsageError(f"{where} must be {span}, not {shown(value)}")
    return value


def _text(where: str, value: str) -> str:
    """*value*, when a command line could carry it as one argument."""
    if "\x00" in value:
        raise UsageError(f"{where} holds a NUL character, which no command line can carry; "
                         "nothing was done")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise UsageError(f"{where} is not valid Unicode text (it holds a lone surrogate); "
                         "nothing was done") from None
    if size > MAX_TEXT_BYTES:
        raise UsageError(f"{where} is {size} bytes long; at most {MAX_TEXT_BYTES} (what one "
                         "command-line argument may hold)")
    return value


__all__ = ["KINDS", "MAX_ITEMS", "MAX_TEXT_BYTES", "Param", "input_schema", "read", "shown"]
