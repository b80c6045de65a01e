"""One argument parser for every ``fm`` command, so help and errors look the same everywhere.

* ``-h/--help`` prints the help on stdout and ends the command with exit 0 (:class:`HelpShown`,
  which ``fm``'s dispatch turns into exit 0; never a SystemExit).
* A bad command line is one :class:`UsageError` line, ``<cmd>: <what argparse found>; run 'fm
  <cmd> --help'`` (``fm`` prefixes ``fm: ``), exit 2. Abbreviated options are not accepted.
* A command group (``fm crew``, ``fm wake`` …) declares its subcommands with
  :meth:`Parser.add_command`: ``fm crew --help`` lists them with their one-line help and
  ``fm crew add --help`` describes add's options.

This module imports argparse (about 5 ms): the hot paths (``fm hook``, ``fm wake append``,
``fm crew status``, ``fm guard`` …) parse by hand and build their parser from here only to print
their help or to word an error, so their help and errors have this same format.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from firstmate.base.errors import HelpShown, UsageError
from firstmate.base.suggest import did_you_mean, option_hint
from firstmate.cli.main import wants_help

#: Help is formatted for this many columns whatever the terminal, so it reads the same in a
#: pipe, a log and a test.
WIDTH = 100
#: An error line quotes at most this much of what argparse said (arguments can be long).
MAX_MESSAGE = 300


class _Formatter(argparse.HelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=WIDTH, max_help_position=34)


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` with fm's help and error behaviour (see the module doc)."""

    def __init__(self, prog: str, description: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("exit_on_error", False)
        super().__init__(prog=prog, description=description, **kwargs)
        #: Subcommand name → its parser (:meth:`add_command`).
        self.commands: dict[str, Parser] = {}
        #: The command whose ``--help`` an error points at (``fm install claude`` for a harness's
        #: flags); the parser's own by default.
        self.help_command = prog
        self._subparsers_action: Any = None

    @property
    def command(self) -> str:
        """The command as ``fm`` names it: ``crew add`` for ``fm crew add``."""
        return self.prog[3:] if self.prog.startswith("fm ") else self.prog

    def add_command(self, name: str, summary: str, **kwargs: Any) -> Parser:
        """A subcommand ``name`` with its one-line *summary* (its help's description too)."""
        if self._subparsers_action is None:
            self._subparsers_action = self.add_subparsers(
                title="commands", dest="command", metavar="COMMAND", required=True,
                parser_class=Parser)
        kwargs.setdefault("description", summary)
        sub: Parser = self._subparsers_action.add_parser(name, help=summary, **kwargs)
        self.commands[name] = sub
        return sub

    def usage_error(self, message: str, hint: str = "") -> UsageError:
        """The one-line usage error of this command, naming its help (after *hint*, a "did you
        mean …? " of :mod:`firstmate.base.suggest`). Whatever the command line held is shown
        escaped and cut, so hostile arguments cannot forge output lines."""
        what = "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(message.split()))
        if len(what) > MAX_MESSAGE:
            what = what[:MAX_MESSAGE] + "..."
        return UsageError(f"{self.command}: {what}; {hint}run '{self.help_command} --help'")

    def error(self, message: str) -> NoReturn:
        raise self.usage_error(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        # argparse exits after printing the help (or a version): end the command there instead.
        if status:
            raise self.usage_error(message or "bad arguments")
        raise HelpShown()

    def print_help(self, file: Any = None) -> None:
        (file or sys.stdout).write(self.format_help())

    def show_help(self) -> NoReturn:
        """Print the help on stdout and end the command (exit 0)."""
        self.print_help()
        raise HelpShown()

    def parse_known(self, argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
        """Like :meth:`parse` (without the subcommand hand-off), but words it does not know are
        returned instead of refused."""
        if wants_help(argv):
            self.show_help()
        try:
            return self.parse_known_args(list(argv))
        except argparse.ArgumentError as exc:
            raise self.usage_error(str(exc)) from None

    def parse(self, argv: Sequence[str]) -> argparse.Namespace:
        """The parsed command line; a group hands everything after the subcommand's name to
        that subcommand's parser (so an error names ``fm crew add``, not ``fm crew``), and
        records the name as ``command``."""
        args = list(argv)
        if self.commands and args and args[0] in self.commands:
            ns = self.commands[args[0]].parse(args[1:])
            if getattr(ns, "command", None) is not None:
                ns.subcommand = ns.command  # (a group within a group: fm wake grant publish)
            ns.command = args[0]
            return ns
        unknown_command = bool(self.commands and args and not args[0].startswith("-"))
        if wants_help(args) and not unknown_command:
            self.show_help()  # -h anywhere among the options, whatever else is wrong
        unknown = self._unknown_option(args)
        if unknown is not None:
            # Said first: argparse would report a missing argument before an unknown option.
            raise self.usage_error(f"unrecognized arguments: {unknown}",
                                   hint=option_hint(unknown.partition("=")[0],
                                                    self._option_string_actions))
        try:
            return self.parse_args(args)
        except argparse.ArgumentError as exc:
            hint = did_you_mean(args[0], self.commands) if unknown_command else ""
            raise self.usage_error(str(exc), hint=hint) from None

    def _unknown_option(self, args: Sequence[str]) -> str | None:
        for word in args:
            if word == "--":
                return None
            if word.startswith("-") and word != "-" and not word[1:].isdigit() \
                    and word.partition("=")[0] not in self._option_string_actions:
                return word
        return None

    def refuse(self, argv: Sequence[str], fallback: str) -> NoReturn:
        """For a hand-parsed hot path that found *argv* wrong: the error this parser gives for
        it (or its help, for ``-h``), else *fallback* in the same format."""
        self.parse(argv)
        raise self.usage_error(fallback)


__all__ = ["WIDTH", "Parser", "wants_help"]
