"""The hand-written readers behind ``fm status``'s fast path agree with the reference parsers
they replace: a regular expression for identity tokens, ``json.loads`` for owner records."""

from __future__ import annotations

import json
import math
import re

from firstmate.base import ownerrecord, proctoken
from firstmate.base.ownerlock import record_json
from hypothesis import given
from hypothesis import strategies as st

TOKEN = re.compile(r"([0-9]{1,10}):([0-9]{1,15}(?:\.[0-9]{1,9})?):([0-9a-f]{8,64})")

token_text = st.one_of(
    st.text(max_size=40),
    st.builds(lambda p, s, h: f"{p}:{s}:{h}",
              st.text("0123456789", max_size=12), st.text("0123456789.", max_size=20),
              st.text("0123456789abcdefABx", max_size=70)),
    st.builds(lambda p, s, h, pad: f"{pad}{p}:{s:.2f}:{h}{pad}", st.integers(0, 2**40),
              st.floats(0, 1e12), st.text("0123456789abcdef", min_size=6, max_size=66),
              st.sampled_from(["", " ", "\n", "\u2003"])),
)


def reference_token(token: object) -> tuple[int, float, str] | None:
    if not isinstance(token, str):
        return None
    m = TOKEN.fullmatch(token.strip())
    if m is None:
        return None
    pid, started = int(m.group(1)), float(m.group(2))
    if pid <= 0 or not math.isfinite(started):
        return None
    return pid, started, m.group(3)


@given(token_text)
def test_token_parsing_matches_the_regular_expression(token: str) -> None:
    assert proctoken.parse(token) == reference_token(token)


def reference_record(data: str | bytes) -> ownerrecord.Record | None:
    try:
        obj = json.loads(data)
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    pid, identity, home, role, at = (
        obj.get(k) for k in ("pid", "identity", "home", "role", "acquired_at"))
    if type(pid) is not int or pid <= 0:
        return None
    if not (isinstance(identity, str) and isinstance(home, str) and isinstance(role, str)):
        return None
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        return None
    return pid, identity, home, role, float(at)


records = st.one_of(
    st.builds(record_json, st.integers(-5, 2**40), st.text(max_size=30), st.text(max_size=30),
              st.text(max_size=10), st.floats(allow_nan=True, allow_infinity=True)),
    st.builds(lambda d: json.dumps(d, sort_keys=True), st.dictionaries(
        st.sampled_from(["pid", "identity", "home", "role", "acquired_at", "x"]),
        st.one_of(st.integers(-3, 99), st.text(max_size=8), st.floats(), st.booleans(),
                  st.none()))),
    st.text(max_size=60),
)


@given(records, st.booleans())
def test_owner_records_read_as_json_reads_them(data: str, as_bytes: bool) -> None:
    raw: str | bytes = data.encode("utf-8", "surrogatepass") if as_bytes else data
    assert ownerrecord.parse(raw) == reference_record(raw)


def test_a_record_whose_time_no_float_can_hold_is_refused_not_raised() -> None:
    data = record_json(42, "42:1.50:abcdef0123456789", "/h", "queue", 1.0).replace(
        '"acquired_at": 1.0', '"acquired_at": 1' + "0" * 400)
    assert json.loads(data)["acquired_at"] == 10**400
    assert ownerrecord.parse(data) is None
    assert ownerrecord.parse(data.replace("1" + "0" * 400, "2.5")) is not None


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**400), 10**400)))
def test_finite_is_math_isfinite_without_raising(value: float) -> None:
    from firstmate.base.envnum import finite

    try:
        expected = math.isfinite(value)
    except OverflowError:
        expected = False
    assert finite(value) is expected


def test_a_record_as_fm_writes_it_is_read_without_json() -> None:
    data = record_json(42, "42:1.50:abcdef0123456789", "/home/u/.firstmate", "watcher", 1.25)
    assert ownerrecord._canonical(data) == (42, "42:1.50:abcdef0123456789", "/home/u/.firstmate",
                                            "watcher", 1.25)
