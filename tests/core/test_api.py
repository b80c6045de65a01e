"""firstmate.api, the plugin contract: every name it exports resolves, mypy sees the same names
it serves, and importing it (or its quick-gate module) loads nothing heavy."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import firstmate.api as api
import pytest

SOURCE = Path(api.__file__)


def _type_checking_names() -> set[str]:
    """The names the module's ``if TYPE_CHECKING:`` block imports or declares (what mypy sees)."""
    tree = ast.parse(SOURCE.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                if isinstance(inner, ast.ImportFrom) and inner.module not in ("typing",):
                    names |= {alias.asname or alias.name for alias in inner.names}
                elif isinstance(inner, ast.AnnAssign) and isinstance(inner.target, ast.Name):
                    names.add(inner.target.id)
    return names


def test_api_version_is_major_dot_minor() -> None:
    assert re.fullmatch(r"[1-9][0-9]*\.[0-9]+", api.API_VERSION)


def test_every_export_resolves_and_is_listed_once() -> None:
    exports = set(api._EXPORTS)
    assert sorted(api.__all__) == sorted({"API_VERSION", *exports})
    assert len(api.__all__) == len(set(api.__all__))
    for name in sorted(exports):
        assert getattr(api, name) is not None, name
        assert name in dir(api)


def test_what_mypy_sees_is_what_the_module_serves() -> None:
    assert _type_checking_names() == set(api._EXPORTS)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        api.NoSuchThing  # noqa: B018
    with pytest.raises(ImportError):
        exec("from firstmate.api import NoSuchThing", {})


def _loaded_after(code: str) -> set[str]:
    probe = (f"import sys\nbefore = set(sys.modules)\n{code}\n"
             "print(' '.join(sorted(set(sys.modules) - before)))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.splitlines()[-1].split())


@pytest.mark.parametrize("module", ["firstmate.api", "firstmate.api.gate"])
def test_importing_the_api_loads_nothing_heavy(module: str) -> None:
    """A hook's quick gate imports firstmate.api.gate on every turn of the harness: only the
    standard library and firstmate's standard-library base layer may load with it."""
    loaded = _loaded_after(f"import {module}")
    heavy = sorted(name for name in loaded
                   if name.split(".")[0] in ("attrs", "pluggy", "psutil", "portalocker",
                                             "typing", "re", "json", "argparse", "pathlib")
                   or (name.startswith("firstmate.")
                       and not name.startswith(("firstmate.base", "firstmate.api"))))
    assert heavy == [], f"importing {module} loaded {heavy}"


def test_a_lazy_name_is_imported_only_when_asked_for() -> None:
    loaded = _loaded_after("import firstmate.api as api\napi.HarnessInfo")
    assert "attrs" in loaded and "firstmate.plugin.harness" in loaded
    assert "firstmate.guards.turnend" not in loaded
