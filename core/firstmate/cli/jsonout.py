"""The one ``--json`` format of every ``fm`` command: one JSON object on one line, keys sorted,
ASCII only (anything else escaped), so a script reads any command the same way."""

from __future__ import annotations

import json
import sys

# Not typing's: importing typing costs a status call (firstmate.cli.status).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


def _plain(value: object) -> object:
    # Declared mappings are read-only views: shown as the objects they are; paths and the
    # like as their text.
    from collections.abc import Mapping

    return dict(value) if isinstance(value, Mapping) else str(value)


def dumps(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True, default=_plain)


def write(obj: Mapping[str, Any]) -> None:
    """Print *obj* as the command's one ``--json`` line."""
    sys.stdout.write(dumps(obj) + "\n")


__all__ = ["dumps", "write"]
