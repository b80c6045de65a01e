"""``fm wake drain`` reads its options by hand (argparse stays off its path): wherever the hand
parser answers, argparse must give the same options, and whatever it does not answer goes to
argparse unchanged."""

from __future__ import annotations

import itertools

import pytest
from firstmate.base.errors import FirstmateError, HelpShown
from firstmate.cli import wake

WORDS = ["--json", "--actor", "main", "branch", "--ack-through", "12", "--recovery-generation",
         "g.1", "--actor=branch", "--ack-through=7", "--json=1", "-5", "--ack", "-h", "", "x"]


def _argparse(args: list[str]) -> dict[str, str] | None:
    try:
        parsed = vars(wake.parser().commands["drain"].parse(args))
    except (FirstmateError, HelpShown):
        return None
    return {"--" + k.replace("_", "-"): ("" if v is True else str(v))
            for k, v in parsed.items() if v is not None and v is not False and k != "command"}


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4])
def test_the_hand_parser_agrees_with_argparse_wherever_it_answers(size: int) -> None:
    answered = 0
    for args in itertools.product(WORDS, repeat=size):
        quick = wake._quick_options(list(args), wake._DRAIN_OPTIONS)
        if quick is None:
            continue
        answered += 1
        assert quick == _argparse(list(args)), args
    assert answered > 0


@pytest.mark.parametrize("args", [["--actor"], ["--json", "--json"], ["--ack"], ["-h"],
                                  ["--json=1"], ["--actor", "--json"], ["x"]])
def test_anything_unusual_is_left_to_argparse(args: list[str]) -> None:
    assert wake._quick_options(args, wake._DRAIN_OPTIONS) is None
