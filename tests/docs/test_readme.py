"""README keeps exactly two set-up commands, and CI runs the second one as written."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert first_block is not None, "README must start with a sh block of set-up commands"
    return [line for line in first_block.group(1).splitlines() if line.strip()]


def test_readme_has_exactly_two_setup_commands() -> None:
    commands = readme_commands()
    assert len(commands) == 2
    assert commands[0].endswith("fm demo")
    assert "tox -m ci" in commands[1]


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert readme_commands()[1] in ci
