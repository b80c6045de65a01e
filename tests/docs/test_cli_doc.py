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
