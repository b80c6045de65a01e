"""``fm uninstall <harness> …``: remove exactly what ``fm install`` wrote (see firstmate.cli.install)."""

from __future__ import annotations

from collections.abc import Sequence

from firstmate.cli.args import Parser


def parser() -> Parser:
    from firstmate.cli.install import parser as install_parser

    return install_parser("uninstall")


def main(argv: Sequence[str]) -> int:
    from firstmate.cli.install import run

    return run(argv, remove=True)
