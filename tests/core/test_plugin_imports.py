"""The plugin contract is firstmate.api: every plugin this repository ships, the template and
the example in docs/writing-a-plugin.md import nothing from firstmate but firstmate.api (with
its quick-gate module) and, in tests, firstmate.testing. Read from the sources, so it holds
with the core alone installed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = ("firstmate.api", "firstmate.testing")
#: Every plugin's shipped code, and the template's tests too: a new plugin starts as a copy.
SOURCES = sorted([*ROOT.glob("plugins/*/src/**/*.py"), *ROOT.glob("plugins/_template/tests/*.py")])


def foreign_imports(source: str) -> list[str]:
    """The ``firstmate`` modules *source* imports that a plugin may not (with their lines)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != "firstmate" else \
                [f"firstmate.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [f"line {node.lineno}: {name}" for name in names
                  if (name == "firstmate" or name.startswith("firstmate."))
                  and not name.startswith(ALLOWED) and name != "firstmate.api"]
    return found


def docs_example() -> str:
    text = (ROOT / "docs" / "writing-a-plugin.md").read_text()
    _, found, rest = text.partition("## A minimal working plugin")
    assert found, "docs/writing-a-plugin.md has no example section"
    match = re.search(r"```python\n(.*?)```", rest, re.S)
    assert match is not None, "the example section has no python block"
    return match.group(1)


def test_there_are_plugins_to_check() -> None:
    assert len({p.parts[len(ROOT.parts) + 1] for p in SOURCES}) >= 8, SOURCES


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_plugin_imports_only_the_api(path: Path) -> None:
    assert foreign_imports(path.read_text()) == [], (
        f"{path.relative_to(ROOT)} reaches into core: import these from firstmate.api instead "
        "(add the name there if a plugin truly needs it)")


def test_the_docs_example_imports_only_the_api() -> None:
    assert foreign_imports(docs_example()) == []


def test_the_check_catches_each_way_of_reaching_in() -> None:
    assert foreign_imports("from firstmate.store.home import Home\n"
                           "import firstmate.plugin.harness\n"
                           "from firstmate import hookimpl\n"
                           "def f():\n    from firstmate.guards import turnend\n") == [
        "line 1: firstmate.store.home", "line 2: firstmate.plugin.harness",
        "line 3: firstmate.hookimpl", "line 5: firstmate.guards"]
    assert foreign_imports("from firstmate.api import Home\nfrom firstmate.api.gate import x\n"
                           "from firstmate.testing import rearm\nimport firstmate_plugin_x\n"
                           "from . import gate\n") == []
