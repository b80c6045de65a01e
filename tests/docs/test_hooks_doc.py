"""docs/hooks.md has one section per hook spec, headed by the spec's exact signature."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from firstmate.plugin import hookspecs

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


def test_every_spec_has_a_production_caller() -> None:
    """A hook nobody calls is dead weight a plugin author would implement for nothing: every
    spec is called from the core's (or a plugin's) own code, not only from tests."""
    root = Path(__file__).resolve().parents[2]
    sources = [*sorted((root / "core" / "firstmate").rglob("*.py")),
               *sorted((root / "plugins").glob("*/src/**/*.py"))]
    text = "\n".join(p.read_text() for p in sources if p.name not in ("hookspecs.py",
                                                                      "testing.py"))
    # Called on every plugin (hook.NAME(...)) or routed by harness (_caller("NAME", ...)).
    uncalled = [name for name in spec_signatures()
                if not re.search(rf"\bhook\.{name}\(|\b_caller\(\s*\"{name}\"", text)]
    assert uncalled == []


def test_each_wrapper_with_a_caller_is_used() -> None:
    # The PluginHost wrappers of the continuity specs are what production code calls.
    root = Path(__file__).resolve().parents[2]
    text = "\n".join(p.read_text() for p in sorted((root / "core" / "firstmate").rglob("*.py"))
                     if p.name not in ("plugins.py", "testing.py"))
    for wrapper in ("rearm_owner", "readiness", "confirm_handoff", "deliver_wake",
                    "bridge_profile", "watch_sources", "harnesses"):
        assert re.search(rf"\.{wrapper}\(", text), f"PluginHost.{wrapper} has no caller"
