"""Core names no harness: harness knowledge lives in the plugins (their HarnessInfo and hooks).

Every identifier and string literal of core's Python source is scanned (comments and
docstrings are prose and may give a harness as an example); a hit means a harness's name,
environment variable or program slipped back into core.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "core" / "firstmate"

#: Harness names, their programs and environment prefixes. ``\b`` keeps ordinary words
#: ("pip", "api", "ompf") and a file cursor ("read_cursor", "DRAIN_CURSOR") out.
HARNESS = re.compile(r"claude|codex|opencode|grok|cursor-agent|cursor_version|(?<![a-z])pi(?![a-z])"
                     r"|(?<![a-z])omp(?![a-z])", re.IGNORECASE)
HARNESS_ENV = re.compile(r"CURSOR_")
#: Literal text tokens: f-string parts are tokens of their own from Python 3.12 on.
TEXT = (tokenize.NAME, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING))


def _docstrings(tree: ast.AST) -> set[int]:
    """Line numbers where a docstring starts (module, class, function)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                lines.add(body[0].lineno)
    return lines


def hits(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    docstrings = _docstrings(ast.parse(text))
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.STRING and tok.start[0] in docstrings:
            continue
        if tok.type not in TEXT:
            continue
        value = tok.string
        # In identifiers, an underscore separates words: "fm_pi_x" names pi, "pip" does not.
        words = value.replace("_", " ") if tok.type == tokenize.NAME else value
        if HARNESS.search(words) or HARNESS_ENV.search(value):
            found.append(f"{path.relative_to(CORE.parent)}:{tok.start[0]}: {value[:80]}")
    return found


def test_the_scanner_tells_harness_names_from_ordinary_words(tmp_path: Path) -> None:
    sample = tmp_path / "firstmate" / "sample.py"
    sample.parent.mkdir()
    sample.write_text('"""Claude, Codex and Pi are examples here."""\n'
                      "# a comment may say omp\n"
                      'PIP = "pip install api-server"\n'
                      "cursor = read_cursor(DRAIN_CURSOR)\n"
                      'ENGINE = ("claude", "-p")\n'
                      'NAME = "CURSOR_PROJECT_DIR"\n'
                      "omp_mode = 1\n"
                      'f"{x} pi"\n')
    global CORE
    saved, CORE = CORE, tmp_path / "firstmate"
    try:
        found = [line.split(": ", 1)[1] for line in hits(sample)]
        assert found[:3] == ['"claude"', '"CURSOR_PROJECT_DIR"', "omp_mode"]
        assert len(found) == 4 and (found[3].endswith(' pi"') or found[3] == " pi")
    finally:
        CORE = saved


def test_core_source_names_no_harness() -> None:
    found = [hit for path in sorted(CORE.rglob("*.py")) for hit in hits(path)]
    assert found == [], "core names a harness (move it into the plugin):\n" + "\n".join(found)
