"""docs/cli.md documents every exit code and every core command."""

from __future__ import annotations

from pathlib import Path

from firstmate.base import exitcodes
from firstmate.cli.main import COMMANDS

DOC = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()


def test_every_exit_code_is_documented() -> None:
    assert exitcodes.names()["QUIET"] == 124
    for name in exitcodes.names():
        assert f"`{name}`" in DOC, name


def test_every_core_command_is_documented() -> None:
    for name in COMMANDS:
        assert f"fm {name}" in DOC, name


def _parsers() -> list[tuple[str, object]]:
    import importlib

    from firstmate.cli.args import Parser

    found: list[tuple[str, object]] = []

    def walk(path: str, parser: Parser) -> None:
        found.append((path, parser))
        for sub, child in parser.commands.items():
            walk(f"{path} {sub}", child)

    for name, (module, _summary) in COMMANDS.items():
        walk(f"fm {name}", importlib.import_module(module).parser())
    return found


def test_every_option_of_every_command_is_documented() -> None:
    import argparse

    for path, parser in _parsers():
        assert isinstance(parser, argparse.ArgumentParser)
        assert path in DOC, path
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            for option in action.option_strings:
                assert option in DOC, (path, option)


def test_every_json_command_is_in_the_common_list() -> None:
    import argparse

    common = DOC[DOC.index("- **`--json`.**"):DOC.index("- **Start-up cost.**")]
    for path, parser in _parsers():
        assert isinstance(parser, argparse.ArgumentParser)
        if any("--json" in action.option_strings for action in parser._actions):
            assert f"`{path}`" in common, path
