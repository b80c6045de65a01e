"""The plugin contract is firstmate.api: every plugin this repository ships, the template and
the example in docs/writing-a-plugin.md import nothing from firstmate but firstmate.api (with
its quick-gate module) and, in tests, firstmate.testing: a plugin's tests arrange and read a
home's state through the test kit, never through core's store. Read from the sources, so it
holds with the core alone installed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = ("firstmate.api", "firstmate.testing")
#: Every plugin's shipped code.
SOURCES = sorted(ROOT.glob("plugins/*/src/**/*.py"))
#: Every plugin's tests (the template's too: a new plugin starts as a copy), with their helpers.
TESTS = sorted(ROOT.glob("plugins/*/tests/**/*.py"))


def _allowed(name: str) -> bool:
    return any(name == ok or name.startswith(f"{ok}.") for ok in ALLOWED)


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
                  and not _allowed(name)]
    return found


def docs_example() -> str:
    text = (ROOT / "docs" / "writing-a-plugin.md").read_text()
    _, found, rest = text.partition("## A minimal working plugin")
    assert found, "docs/writing-a-plugin.md has no example section"
    match = re.search(r"```python\n(.*?)```", rest, re.S)
    assert match is not None, "the example section has no python block"
    return match.group(1)


def _plugins(paths: list[Path]) -> set[str]:
    return {p.parts[len(ROOT.parts) + 1] for p in paths}


def test_there_are_plugins_to_check() -> None:
    assert len(_plugins(SOURCES)) >= 8, SOURCES
    # Every plugin with code has tests, and the template's are among them.
    assert _plugins(TESTS) == _plugins(SOURCES) and "_template" in _plugins(TESTS), TESTS


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_plugin_imports_only_the_api(path: Path) -> None:
    assert foreign_imports(path.read_text()) == [], (
        f"{path.relative_to(ROOT)} reaches into core: import these from firstmate.api instead "
        "(add the name there if a plugin truly needs it)")


@pytest.mark.parametrize("path", TESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_plugins_tests_import_only_the_api_and_the_test_kit(path: Path) -> None:
    assert foreign_imports(path.read_text()) == [], (
        f"{path.relative_to(ROOT)} reaches into core: a plugin's tests use firstmate.api and "
        "firstmate.testing (firstmate.testing.plant arranges a home's state, "
        "firstmate.testing.state reads it; add a helper there if a test truly needs one)")


def test_the_docs_example_imports_only_the_api() -> None:
    assert foreign_imports(docs_example()) == []


def test_the_check_catches_each_way_of_reaching_in() -> None:
    assert foreign_imports("from firstmate.store.home import Home\n"
                           "import firstmate.plugin.harness\n"
                           "from firstmate import hookimpl\n"
                           "def f():\n    from firstmate.guards import turnend\n") == [
        "line 1: firstmate.store.home", "line 2: firstmate.plugin.harness",
        "line 3: firstmate.hookimpl", "line 5: firstmate.guards"]
    # A name that only starts like an allowed module is not it.
    assert foreign_imports("import firstmate.apix\nfrom firstmate.testingkit import x\n") == [
        "line 1: firstmate.apix", "line 2: firstmate.testingkit"]
    assert foreign_imports("from firstmate.api import Home\nfrom firstmate.api.gate import x\n"
                           "from firstmate.testing import rearm\nimport firstmate_plugin_x\n"
                           "from firstmate.testing.plant import plant_claim\n"
                           "from . import gate\n") == []
