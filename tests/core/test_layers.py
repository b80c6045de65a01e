"""The layout is the architecture (docs/architecture.md): core's subpackages are layers, imports
point one way (function-level imports included), nothing imports in a cycle, the two
standard-library layers (the foundations and the hot paths' domain logic) import nothing outside
themselves, and no module grows past ~600 lines."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import firstmate
import pytest

ROOT = Path(firstmate.__file__).resolve().parent
#: Lowest first: a module may import its own layer and the ones before it, never one after.
LAYERS = ("base", "fast", "store", "fleet", "plugin", "watch", "continuity", "host", "guards",
          "rearm", "app", "cli", "mcp", "api", "testing")
#: The layers that import only the standard library (and the ones among these below them): what
#: a hot command path may load.
STDLIB_LAYERS = ("base", "fast")
#: ``firstmate`` itself gives plugins their ``hookimpl`` marker (pluggy, imported only when a
#: plugin asks for it): the plugin layer. ``python -m firstmate`` is the command line.
TOP = {"firstmate": "plugin", "firstmate.__main__": "cli"}
#: Lines a module may have: about 600, with a little room for a docstring's growth.
MAX_LINES = 650


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def layer_of(module: str) -> str:
    if module in TOP:
        return TOP[module]
    layer = module.split(".")[1]
    assert layer in LAYERS, f"{module} is in no layer: put it in one of {LAYERS}"
    return layer


def _type_only(tree: ast.AST) -> set[int]:
    """Nodes under ``if TYPE_CHECKING:``: annotations only, never run."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(inner) for sub in node.body for inner in ast.walk(sub)}
    return skip


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str) -> dict[str, set[str]]:
    """Every name *module* imports when it runs (module level or inside a function), as
    ``{"firstmate.x.y": …}`` for our modules and ``{"": {top-level names}}`` for the rest."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_only(tree)
    ours: set[str] = set()
    others: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            names = [f"{base}.{alias.name}" for alias in node.names] or [base]
            if not base.startswith("firstmate"):
                names = [base]
        for name in names:
            if name.split(".")[0] == "firstmate":
                target = _resolve(name)
                if target and target != module:
                    ours.add(target)
            else:
                others.add(name.split(".")[0])
    return {"ours": ours, "": others}


GRAPH = {module: imports(module) for module in MODULES}


def test_every_module_sits_in_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


def test_imports_point_down_the_layers() -> None:
    wrong = []
    for module, found in GRAPH.items():
        mine = LAYERS.index(layer_of(module))
        for target in sorted(found["ours"]):
            if LAYERS.index(layer_of(target)) > mine:
                wrong.append(f"{module} ({layer_of(module)}) imports {target} "
                             f"({layer_of(target)})")
    assert not wrong, "imports that point up the layers:\n" + "\n".join(wrong)


def test_nothing_imports_in_a_cycle() -> None:
    # Tarjan's strongly connected components over every runtime import.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(GRAPH[node]["ours"]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(GRAPH)))
    for module in GRAPH:
        if module not in index:
            visit(module)
    assert not cycles, "modules that import each other: " + "; ".join(map(str, cycles))


@pytest.mark.parametrize("layer", STDLIB_LAYERS)
def test_the_standard_library_layers_import_only_the_standard_library_and_themselves(
        layer: str) -> None:
    outside = []
    for module, found in GRAPH.items():
        if layer_of(module) != layer:
            continue
        outside += [f"{module} imports {name}" for name in sorted(found[""])
                    if name not in sys.stdlib_module_names and name != "__future__"]
        outside += [f"{module} imports {target}" for target in sorted(found["ours"])
                    if layer_of(target) not in STDLIB_LAYERS]
    assert not outside, "\n".join(outside)


@pytest.mark.parametrize("layer", STDLIB_LAYERS)
def test_importing_a_standard_library_layer_loads_nothing_else(layer: str) -> None:
    """The same fence at run time: every module of *layer* imported in a fresh interpreter,
    then nothing but the standard library and that layer (with the ones below it) is loaded."""
    mine = sorted(m for m in MODULES if layer_of(m) == layer)
    allowed = STDLIB_LAYERS[: STDLIB_LAYERS.index(layer) + 1]

    def loaded(names: list[str]) -> set[str]:
        code = ("import importlib, json, sys\n"
                f"for name in {names!r}:\n"
                "    importlib.import_module(name)\n"
                "print(json.dumps(sorted(sys.modules)))\n")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return set(json.loads(done.stdout))

    # What the interpreter loads by itself (site, .pth hooks) is not the layer's doing.
    extra = loaded(mine) - loaded([])
    foreign = sorted(name for name in extra
                     if not (name.split(".")[0] in sys.stdlib_module_names
                             or name == "firstmate"
                             or (name.startswith("firstmate.") and layer_of(name) in allowed)))
    assert not foreign, f"importing the {layer} layer loaded {foreign}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_about_600_lines(module: str) -> None:
    lines = MODULES[module].read_text().count("\n")
    assert lines <= MAX_LINES, f"{module} has {lines} lines: split it along its jobs"
