"""Reading a lock's owner record (the JSON :func:`firstmate.base.ownerlock.record_json` writes) as
plain values.

:meth:`firstmate.store.locks.OwnerRecord.from_json` is :func:`parse` wrapped in the class. A record
exactly as fm writes it is read without importing :mod:`json` (whose decoder pulls in ``re``, a
cost ``fm status`` cannot afford); anything else goes through ``json.loads`` with the same rules.
"""

from __future__ import annotations

from firstmate.base.envnum import finite

#: (pid, identity, home, role, acquired_at): the fields of an owner record.
Record = tuple[int, str, str, str, float]

_FIELDS = ('{"acquired_at": ', ', "home": ', ', "identity": ', ', "pid": ', ', "role": ')


def parse(data: str | bytes) -> Record | None:
    """The record in *data*, or None when it is not a well-formed owner record."""
    fast = _canonical(data)
    if fast is not None:
        return fast
    import json

    try:
        obj = json.loads(data)
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    pid, identity, home, role, at = (
        obj.get(k) for k in ("pid", "identity", "home", "role", "acquired_at")
    )
    if type(pid) is not int or pid <= 0:
        return None
    if not (isinstance(identity, str) and isinstance(home, str) and isinstance(role, str)):
        return None
    if isinstance(at, bool) or not isinstance(at, int | float) or not finite(at):
        return None
    return pid, identity, home, role, float(at)


def string(text: str) -> str | None:
    """A JSON string with no escapes: printable ASCII between quotes, no quote or backslash
    inside; None for anything else."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return None
    inner = text[1:-1]
    if not inner.isprintable() or '"' in inner or "\\" in inner:
        return None
    return inner


def positive(text: str) -> int | None:
    """A JSON integer above zero, written without a sign or leading zeros; else None."""
    if not (text.isdigit() and str(int(text)) == text and int(text) > 0):
        return None
    return int(text)


def number(text: str) -> float | None:
    """A finite float exactly as ``json.dumps`` writes it (its ``repr``); else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if finite(value) and repr(value) == text else None


def fields(text: str, labels: tuple[str, ...]) -> list[str] | None:
    """The raw values of a one-line JSON object as ``json.dumps(sort_keys=True)`` writes it
    with printable ASCII values: *labels* are its opening ``{"name": `` and each ``, "name": ``
    after it, in order. None when *text* is not of that shape."""
    if not (text.isascii() and text.startswith(labels[0]) and text.endswith("}")):
        return None
    values: list[str] = []
    rest = text[len(labels[0]):-1]
    for label in labels[1:]:
        # No value holds a quote, so the first ', "<name>": ' after a value's opening ends it.
        value, found, rest = rest.partition(label)
        if not found:
            return None
        values.append(value)
    values.append(rest)
    return values


def _canonical(data: str | bytes) -> Record | None:
    """The record when *data* is exactly what :func:`record_json` writes for printable ASCII
    values (then ``json.loads`` would read the same); None means "ask json"."""
    if isinstance(data, bytes):
        if not data.isascii():
            return None
        data = data.decode("ascii")
    values = fields(data, _FIELDS)
    if values is None:
        return None
    at_text, home_text, identity_text, pid_text, role_text = values
    home, identity, role = string(home_text), string(identity_text), string(role_text)
    pid, at = positive(pid_text), number(at_text)
    if home is None or identity is None or role is None or pid is None or at is None:
        return None
    return pid, identity, home, role, at


__all__ = ["Record", "fields", "number", "parse", "positive", "string"]
