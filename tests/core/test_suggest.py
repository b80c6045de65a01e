"""The closest known name of a typo (firstmate.base.suggest): one that is close, never a stranger."""

from __future__ import annotations

import pytest
from firstmate.base.suggest import closest, did_you_mean, option_hint


@pytest.mark.parametrize(("word", "known", "found"), [
    ("instal", ["install", "uninstall", "status"], "install"),
    ("alpah", ["alpha", "bravo"], "alpha"),
    ("zulu", ["alpha", "bravo"], None),  # nothing close
    ("alpha", ["alpha", "alphb"], None),  # itself a known name
    ("", ["a"], None),
    ("x" * 65, ["x" * 64], None),  # too long to be a typo
])
def test_closest(word: str, known: list[str], found: str | None) -> None:
    assert closest(word, known) == found
    assert did_you_mean(word, known) == (f"did you mean {found!r}? " if found else "")


@pytest.mark.parametrize(("word", "hint"), [
    ("--jsno", "did you mean '--json'? "),
    ("-json", "did you mean '--json'? "),  # one dash short
    ("--dryrun", "did you mean '--dry-run'? "),
    ("--nope", ""),  # shares only the dashes with --codex: no suggestion
    ("--json", ""),
])
def test_options_are_compared_without_their_dashes(word: str, hint: str) -> None:
    assert option_hint(word, ["-h", "--help", "--json", "--dry-run", "--codex"]) == hint
