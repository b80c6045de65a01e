"""How a harness starts as a crew: the question ``fm crew spawn`` asks a plugin, and its answer.

Core knows tmux, the home and the reporting protocol; only the harness's plugin knows how its
program is started, how it takes a first prompt and how it hears of its own turn ends. So
``fm crew spawn`` hands the plugin a :class:`CrewLaunchRequest` through ``firstmate_crew_launch``
and runs the :class:`CrewLaunch` it answers: the argv, the environment to add, how the first
prompt is given, and the crew-mode config files (written into the crew's own launch directory,
never into the project) that record every turn end with ``fm crew turn-ended NAME``.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

import attrs

from firstmate.plugin.harness import read_only

#: The first prompt goes on the command line (the plugin put :attr:`CrewLaunchRequest.brief`
#: into :attr:`CrewLaunch.argv`).
PROMPT_ARGV = "argv"
#: Core types the first prompt into the pane once :attr:`CrewLaunch.ready` shows on it.
PROMPT_TYPE = "type"
PROMPT_MODES = (PROMPT_ARGV, PROMPT_TYPE)


@attrs.frozen
class CrewLaunchRequest:
    """What ``fm crew spawn`` asks the crew's harness plugin to start."""

    #: The crew's name (``FM_CREW`` in its environment).
    crew: str
    #: The directory the crew works in (absolute).
    cwd: Path
    #: The Firstmate home the crew reports to (``FM_HOME`` in its environment).
    home: Path
    #: The whole first prompt: the crew's brief, its task and the reporting protocol.
    brief: str
    #: This installation's ``fm`` as argv words, by absolute path (firstmate.plugin.fmcommand):
    #: what the crew's turn-end hook and its reports run.
    fm_argv: tuple[str, ...]
    #: A private directory of this crew's own (absolute): the relative paths of
    #: :attr:`CrewLaunch.files` are written under it before the harness starts.
    launch_dir: Path
    #: Words the user passed for the harness (``--harness-arg``), to go before the prompt.
    extra_args: tuple[str, ...] = ()

    def fm(self, *args: str) -> list[str]:
        """This installation's ``fm`` with *args*, as argv words."""
        return [*self.fm_argv, *args]

    def fm_command(self, *args: str) -> str:
        """:meth:`fm` as one shell-quoted command line."""
        return shlex.join(self.fm(*args))

    def turn_ended_argv(self) -> list[str]:
        """What the crew's harness runs at every turn end: ``fm crew turn-ended NAME``."""
        return self.fm("crew", "turn-ended", self.crew)

    def file(self, relative: str) -> Path:
        """The absolute path a :class:`CrewFile` at *relative* is written to."""
        return self.launch_dir / relative


def _relative(instance: object, attribute: object, value: str) -> None:
    path = PurePosixPath(value)
    if not value or path.is_absolute() or ".." in path.parts or "\\" in value:
        raise ValueError(f"crew file path {value!r} must be relative, inside the launch directory")


@attrs.frozen
class CrewFile:
    """A crew-mode config file the plugin needs written before its harness starts."""

    #: Path relative to the crew's launch directory (``settings.json``, ``ext/crew.ts``).
    path: str = attrs.field(validator=_relative)
    text: str


def _files(value: Iterable[CrewFile]) -> tuple[CrewFile, ...]:
    return tuple(value)


def _words(value: Iterable[object]) -> tuple[str, ...]:
    return tuple(str(word) for word in value)


def _argv(instance: object, attribute: object, value: tuple[str, ...]) -> None:
    if not value or not value[0]:
        raise ValueError("a crew launch needs a program to run")


@attrs.frozen
class CrewLaunch:
    """A plugin's answer: how to start its harness as the crew asked for."""

    #: The program and its arguments. A bare program name is looked up on the spawning user's
    #: ``PATH`` (and refused with one line when it is not there).
    argv: tuple[str, ...] = attrs.field(converter=_words, validator=_argv)
    #: Variables added to the crew's environment (after ``FM_CREW`` and ``FM_HOME``).
    env: Mapping[str, str] = attrs.field(factory=dict, converter=read_only, hash=False)
    #: Variables of the spawning session that must not reach the crew (a harness refusing to
    #: start inside a session of its own kind, the spawner's session ids).
    unset_env: tuple[str, ...] = attrs.field(default=(), converter=_words)
    #: :data:`PROMPT_ARGV` or :data:`PROMPT_TYPE`.
    prompt: str = attrs.field(default=PROMPT_ARGV, validator=attrs.validators.in_(PROMPT_MODES))
    #: For :data:`PROMPT_TYPE`: a regular expression the pane's text matches once the harness
    #: takes input (searched in the captured screen, whose lines carry no trailing blanks).
    ready: str = ""
    files: tuple[CrewFile, ...] = attrs.field(default=(), converter=_files)
    #: Lines for the user (what the crew may still ask on its first start, …).
    notes: tuple[str, ...] = attrs.field(default=(), converter=_words)


__all__ = ["PROMPT_ARGV", "PROMPT_MODES", "PROMPT_TYPE", "CrewFile", "CrewLaunch",
           "CrewLaunchRequest"]
