"""Every ``fm`` command and subcommand: ``--help`` on stdout with exit 0 describing each option,
``fm help CMD`` the same text, an unknown option refused in one ``fm: …`` line naming the help,
and the version flags."""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
from collections.abc import Iterator, Mapping

import pytest
from firstmate import __version__
from firstmate.cli.args import Parser
from firstmate.cli.main import COMMANDS
from firstmate.store.home import Home
from firstmate.testing import fm_command

DEADLINE = 60.0
#: Bad arguments exit 2, except where exit 2 means something to a harness: the turn-end guard
#: exits 1 (2 is "block") and the pull guard always exits 0 (a warning tool never fails its
#: caller); both still say what was wrong in the same one line.
BAD_ARGUMENTS_EXIT = {"turnend-guard": 1, "guard": 0}


def command_parser(name: str) -> Parser:
    module = importlib.import_module(COMMANDS[name][0])
    made = module.parser()
    assert isinstance(made, Parser), name
    return made


def walk(path: tuple[str, ...], parser: Parser) -> Iterator[tuple[tuple[str, ...], Parser]]:
    yield path, parser
    for sub, child in parser.commands.items():
        yield from walk((*path, sub), child)


PATHS = [path for name in sorted(COMMANDS) for path, _ in walk((name,), command_parser(name))]


def parser_at(path: tuple[str, ...]) -> Parser:
    parser = command_parser(path[0])
    for word in path[1:]:
        parser = parser.commands[word]
    return parser


def described(parser: Parser) -> list[argparse.Action]:
    """The parser's own arguments (not -h, not hidden, not the subcommand chooser)."""
    return [action for action in parser._actions
            if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
            and action.help != argparse.SUPPRESS]


def fm(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(fm_command(*args), capture_output=True, text=True, env=dict(env),
                          timeout=DEADLINE, check=False, stdin=subprocess.DEVNULL)


def test_every_command_has_a_parser_and_every_path_is_listed() -> None:
    assert {path[0] for path in PATHS} == set(COMMANDS)
    assert ("crew", "add") in PATHS and ("wake", "grant", "publish") in PATHS


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_help_is_stdout_exit_0_and_describes_every_option(path: tuple[str, ...],
                                                          fm_env: Mapping[str, str]) -> None:
    parser = parser_at(path)
    done = fm(fm_env, *path, "--help")
    assert (done.returncode, done.stderr) == (0, ""), done
    text = done.stdout
    assert text.startswith(f"usage: fm {' '.join(path)}"), text
    assert parser.description and " ".join(parser.description.split()[:4]) in " ".join(text.split())
    for action in described(parser):
        assert action.help and len(action.help) > 10, (path, action.dest)
        shown = action.option_strings[-1] if action.option_strings else str(action.metavar)
        assert shown in text, (path, shown)
        assert " ".join(action.help.split()[:3]).replace("%%", "%") in " ".join(text.split())
    for sub, child in parser.commands.items():
        summary = " ".join(str(child.description).split()[:3])
        assert re.search(rf"^\s+{re.escape(sub)}\s", text, re.M), (path, sub)
        assert summary in " ".join(text.split()), (path, sub)
    # -h is the same, and so is fm help PATH.
    assert fm(fm_env, *path, "-h").stdout == text
    helped = fm(fm_env, "help", *path)
    assert (helped.returncode, helped.stdout, helped.stderr) == (0, text, "")


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_an_unknown_option_is_refused_in_one_line_naming_the_help(
        path: tuple[str, ...], fm_env: Mapping[str, str], fm_home: Home) -> None:
    before = sorted(p.name for p in fm_home.root.rglob("*"))
    done = fm(fm_env, *path, "--no-such-option")
    assert done.returncode == BAD_ARGUMENTS_EXIT.get(path[0], 2), done
    assert done.stdout == "" and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    command = " ".join(path)
    ignored = " (ignored)" if path[0] == "guard" else ""
    assert lines == [f"fm: {command}: unrecognized arguments: --no-such-option{ignored}; "
                     f"run 'fm {command} --help'"], done.stderr
    assert sorted(p.name for p in fm_home.root.rglob("*")) == before  # nothing ran


def test_fm_help_lists_every_command(fm_env: Mapping[str, str]) -> None:
    for args in (["help"], ["--help"], ["-h"]):
        done = fm(fm_env, *args)
        assert done.returncode == 0 and done.stderr == ""
        for name, (_module, summary) in COMMANDS.items():
            assert f"  {name} " in done.stdout and summary in done.stdout, name
        assert "fm help COMMAND" in done.stdout


def test_fm_help_of_an_unknown_command_is_a_usage_error(fm_env: Mapping[str, str]) -> None:
    done = fm(fm_env, "help", "no-such-command")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("fm: unknown command 'no-such-command'; run 'fm help' to list the "
                           "commands\n")


@pytest.mark.parametrize("args", [["help", "crew", "nosuch"], ["crew", "nosuch", "--help"],
                                  ["help", "wake", "grant", "nosuch"]])
def test_help_of_an_unknown_subcommand_is_a_usage_error(args: list[str],
                                                        fm_env: Mapping[str, str]) -> None:
    done = fm(fm_env, *args)
    assert done.returncode == 2 and done.stdout == ""
    assert "invalid choice: 'nosuch'" in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(flag: str, fm_env: Mapping[str, str]) -> None:
    done = fm(fm_env, flag)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"fm {__version__}\n", "")


def test_a_hostile_argument_cannot_forge_a_second_error_line(fm_env: Mapping[str, str]) -> None:
    done = fm(fm_env, "status", "--x\nfm: forged\x1b[2J" + "y" * 2000)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "\x1b" not in done.stderr
    assert len(done.stderr) < 500


def test_fm_help_groups_every_command_once_by_who_runs_it(fm_env: Mapping[str, str]) -> None:
    from firstmate.cli.helptext import GROUPS

    grouped = [name for _heading, names in GROUPS for name in names]
    assert sorted(grouped) == sorted(COMMANDS)  # each core command in exactly one group
    done = fm(fm_env, "help")
    headings = [line[:-1] for line in done.stdout.splitlines() if line.endswith(":")
                and not line.startswith(" ")]
    assert headings[:5] == ["options", "everyday commands", "now and then",
                            "the model's commands (the wake it drains and acknowledges)",
                            "plumbing (harness hooks, shims, the watcher and scripts run these)"]
    sections = done.stdout.split("\n\n")
    everyday = next(s for s in sections if s.startswith("everyday commands:"))
    assert [line.split()[0] for line in everyday.splitlines()[1:]] == [
        "install", "uninstall", "plugin", "crew", "status", "top", "doctor", "demo"]
    plumbing = next(s for s in sections if s.startswith("plumbing"))
    assert "  hook " in plumbing and "  turnend-guard " in plumbing and "  install " not in plumbing


@pytest.mark.parametrize(("args", "line"), [
    (["instal"], "fm: unknown command 'instal'; did you mean 'install'? run 'fm help' to list "
                 "the commands"),
    (["help", "statsu"], "fm: unknown command 'statsu'; did you mean 'status'? run 'fm help' to "
                         "list the commands"),
    (["status", "--jsno"], "fm: status: unrecognized arguments: --jsno; did you mean '--json'? "
                           "run 'fm status --help'"),
    (["crew", "lsit"], "fm: crew: argument COMMAND: invalid choice: 'lsit' (choose from 'add', "
                       "'remove', 'status', 'turn-ended', 'answer', 'spawn', 'steer', 'stop', "
                       "'list', 'peek', 'attach'); did you mean 'list'? run 'fm crew --help'"),
    (["plugin", "ad", "x"], "fm: plugin: argument COMMAND: invalid choice: 'ad' (choose from "
                            "'add', 'remove', 'list'); did you mean 'add'? run 'fm plugin --help'"),
])
def test_a_typo_gets_the_closest_name_in_its_one_line(args: list[str], line: str,
                                                      fm_env: Mapping[str, str]) -> None:
    done = fm(fm_env, *args)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")


def test_uninstall_offers_no_option_that_means_nothing_to_it(fm_env: Mapping[str, str]) -> None:
    install = fm(fm_env, "install", "--help").stdout
    uninstall = fm(fm_env, "uninstall", "--help").stdout
    assert "--home DIR" in install and "--fm-command CMD" in install
    assert "--home" not in uninstall and "--fm-command" not in uninstall
    assert "--project DIR" in uninstall and "--dry-run" in uninstall
