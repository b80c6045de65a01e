"""docs/cli.md documents every exit code and every core command."""

from __future__ import annotations

from pathlib import Path

from firstmate.base.exitcodes import ExitCode
from firstmate.cli.main import COMMANDS

DOC = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()


def test_every_exit_code_is_documented() -> None:
    for code in ExitCode:
        assert f"`{code.name}`" in DOC, code.name


def test_every_core_command_is_documented() -> None:
    for name in COMMANDS:
        assert f"fm {name}" in DOC, name
