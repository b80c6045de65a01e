"""Harness plugins installed on this machine in an environment this fm does not load.

``pipx install firstmate-plugin-<harness>`` gives each plugin a venv of its own, and the fm on
PATH is the one of the venv that exposed it first: the others' plugins are installed, yet fm
says they are not. This finds them (pipx's venvs and uv's tools, read-only, a bounded number of
directories) so fm can name the command that brings one into its own environment: ``fm plugin
add`` with the wheel or directory it was installed from when that is still there, else with the
harness's name.
"""

from __future__ import annotations

import configparser
import json
import os
import shlex
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse

import attrs

from firstmate.base.errors import FirstmateError
from firstmate.base.exitcodes import ExitCode
from firstmate.base.names import ENTRY_POINT_GROUP
from firstmate.plugin.installroute import pipx_homes

#: At most this many environments are looked at in each place (a machine has a few).
MAX_ENVIRONMENTS = 256
#: The largest metadata file read.
MAX_FILE = 64 * 1024


@attrs.frozen
class Found:
    """One plugin distribution installed in another environment."""

    harness: str
    version: str
    #: The environment (a pipx venv or a uv tool) that holds it.
    environment: Path
    #: "pipx venv" or "uv tool".
    kind: str
    #: The local wheel, sdist or project directory it was installed from, if still there.
    source: Path | None

    def command(self) -> str:
        """The command that installs it into this fm's environment."""
        return shlex.join(["fm", "plugin", "add", str(self.source) if self.source else
                           self.harness])

    def where(self) -> str:
        return f"{self.kind} {self.environment.name} ({self.environment})"


def places(env: Mapping[str, str]) -> list[tuple[str, Path]]:
    """The directories whose subdirectories are pipx venvs or uv tools."""
    found = [("pipx venv", home / "venvs") for home in pipx_homes(env)]
    user = Path(env.get("HOME") or os.path.expanduser("~"))
    data = Path(env["XDG_DATA_HOME"]) if env.get("XDG_DATA_HOME") else user / ".local/share"
    tools = [Path(env["UV_TOOL_DIR"])] if env.get("UV_TOOL_DIR") else [data / "uv" / "tools"]
    found += [("uv tool", tool) for tool in tools]
    return found


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _environments(env: Mapping[str, str], own: Path) -> Iterator[tuple[str, Path]]:
    seen: list[Path] = []
    for kind, place in places(env):
        try:
            entries = sorted(os.scandir(place), key=lambda e: e.name)[:MAX_ENVIRONMENTS]
        except OSError:
            continue
        for entry in entries:
            path = Path(entry.path)
            if not entry.is_dir(follow_symlinks=False) or _same(path, own) \
                    or any(_same(path, other) for other in seen):
                continue
            seen.append(path)
            yield kind, path


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as fh:
            return fh.read(MAX_FILE).decode("utf-8", "replace")
    except OSError:
        return None


def _harness(info: Path) -> str | None:
    """The harness name the distribution registers (its entry point), None when none."""
    text = _read(info / "entry_points.txt")
    if text is None:
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
        names = list(parser[ENTRY_POINT_GROUP]) if parser.has_section(ENTRY_POINT_GROUP) else []
    except configparser.Error:
        return None
    return names[0] if len(names) == 1 and names[0].isprintable() else None


def _source(info: Path) -> Path | None:
    """The local file or directory pip or uv installed the distribution from, if it is still
    there (direct_url.json, PEP 610)."""
    text = _read(info / "direct_url.json")
    try:
        url = json.loads(text)["url"] if text else None
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(url, str) or not url.startswith("file://"):
        return None
    path = Path(unquote(urlparse(url).path))
    if not path.is_absolute() or not str(path).isprintable() or not path.exists():
        return None
    return path


def _plugins(environment: Path) -> Iterator[tuple[str, str, Path | None]]:
    # Every distribution whose entry points register a harness, whatever its name.
    for info in sorted(environment.glob("lib/python3*/site-packages/*.dist-info")):
        harness = _harness(info)
        if harness is None:
            continue
        version = info.name[:-len(".dist-info")].partition("-")[2]
        yield harness, version if version.isprintable() else "", _source(info)


def find(env: Mapping[str, str], own_prefix: Path, harness: str | None = None) -> list[Found]:
    """Plugins (those of *harness* only, when given) installed in pipx venvs and uv tools other
    than the environment *own_prefix*."""
    found: list[Found] = []
    for kind, environment in _environments(env, own_prefix):
        for name, version, source in _plugins(environment):
            if harness is None or name == harness:
                found.append(Found(name, version, environment, kind, source))
    return found


def missing(harness: str, installed: Iterable[str],
            env: Mapping[str, str] | None = None) -> FirstmateError:
    """The error for a harness whose plugin this fm cannot load: the command that brings it in
    from another environment where one holds it, else the closest installed name, else how to
    add it (exit 5)."""
    from firstmate.base.suggest import closest
    from firstmate.plugin.installroute import is_harness_name, located

    env = os.environ if env is None else env
    shown = repr(harness[:40])
    named = is_harness_name(harness)
    prefix, here = located(env)
    there = find(env, prefix, harness) if named else []
    if there:
        message = (f"the {harness} plugin is installed in {there[0].where()}, not in this fm's "
                   f"environment ({here}); bring it here with: {there[0].command()}")
    else:
        near = closest(harness, installed)
        add = (f"add it with: fm plugin add {harness}" if named else
               "harness names are lower-case words (fm plugin list shows the installed ones)")
        message = f"no Firstmate plugin for harness {shown} is installed; " + (
            f"did you mean {near!r}? otherwise {add}" if near else add)
    return FirstmateError(message, exit_code=ExitCode.PLUGIN)


__all__ = ["MAX_ENVIRONMENTS", "Found", "find", "missing", "places"]
