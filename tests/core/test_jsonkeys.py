"""The quick gates' JSON key reader agrees with ``json`` on every object it answers for."""

from __future__ import annotations

import json

import pytest
from firstmate.base.jsonkeys import top_level_keys
from hypothesis import given
from hypothesis import strategies as st

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10)


@given(st.dictionaries(st.text(), VALUES, max_size=6), st.booleans())
def test_the_keys_of_any_object_json_writes(obj: dict[str, object], indent: bool) -> None:
    data = json.dumps(obj, indent=2 if indent else None, ensure_ascii=False).encode()
    found = top_level_keys(data)
    if found is None:  # unsure only of keys that carry an escape
        assert any("\\" in json.dumps(key, ensure_ascii=False) for key in obj)
    else:
        assert list(found) == list(obj)


@pytest.mark.parametrize("data", [b"", b"{", b"[1]", b'{"a":}', b'{"a" 1}', b'{"a":1,}',
                                  b'{"a":1} x', b"\xff{", b'"x"', b'{"a": "unclosed}'])
def test_anything_else_is_unknown(data: bytes) -> None:
    assert top_level_keys(data) is None


def test_a_key_named_inside_a_value_is_not_a_key() -> None:
    data = json.dumps({"hook_event_name": "Stop", "note": 'set "cursor_version": 1'}).encode()
    assert top_level_keys(data) == {"hook_event_name": None, "note": None}
