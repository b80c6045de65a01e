"""docs/hooks.md has one section per hook spec, headed by the spec's exact signature."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from firstmate import hookspecs

DOC = Path(__file__).resolve().parents[2] / "docs" / "hooks.md"


def spec_signatures() -> dict[str, str]:
    specs = {}
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction):
        if not name.startswith("firstmate_"):
            continue
        params = ", ".join(inspect.signature(func).parameters)
        ret = inspect.signature(func).return_annotation
        specs[name] = f"{name}({params}) -> {ret}"
    return specs


def doc_headings() -> dict[str, str]:
    headings = {}
    for match in re.finditer(r"^## `(firstmate_\w+)\((.*?)\) -> (.+?)`\s*$", DOC.read_text(), re.M):
        headings[match.group(1)] = f"{match.group(1)}({match.group(2)}) -> {match.group(3)}"
    return headings


def test_every_spec_is_documented_with_its_signature() -> None:
    assert spec_signatures() == doc_headings()


def test_every_spec_is_keyword_only_by_convention() -> None:
    # pluggy calls hooks with keywords; specs must not use *args or positional-only params.
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction):
        if name.startswith("firstmate_"):
            kinds = {p.kind for p in inspect.signature(func).parameters.values()}
            assert kinds <= {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}
