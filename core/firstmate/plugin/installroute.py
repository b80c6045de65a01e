"""How this fm was installed, and the command that adds a harness plugin to that same place.

fm loads only the plugins installed in its own environment, so a plugin installed any other way
(``pipx install`` of the plugin makes a second venv) is one fm never sees. ``fm plugin add``
therefore runs the installer that owns fm's environment:

* **pipx** (the environment holds ``pipx_metadata.json``): ``pipx inject VENV SPEC``, and
  ``pipx uninject VENV DIST`` to take one out;
* **uv tool** (``uv-receipt.toml``): ``uv tool install`` again with every requirement the
  receipt records plus the new one as ``--with`` (a ``uv tool install`` replaces the tool's
  environment with exactly what it is given, so an earlier ``--with`` left out is removed);
* anything else, a virtual environment or a Python of your own: ``<this interpreter> -m pip
  install SPEC`` (``uv pip install --python <this interpreter>`` when it has no pip).

Standard library plus attrs; nothing here runs a command (firstmate.cli.plugin does).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from firstmate.base.errors import FirstmateError, UsageError
from firstmate.base.names import PLUGIN_MODULE_PREFIX

PIPX = "pipx"
UV_TOOL = "uv-tool"
PIP = "pip"
#: The files that mark an environment as pipx's or uv's.
PIPX_MARK = "pipx_metadata.json"
UV_MARK = "uv-receipt.toml"
#: A plugin's distribution is named ``firstmate-plugin-<harness>``.
DIST_PREFIX = PLUGIN_MODULE_PREFIX.replace("_", "-")
#: The largest receipt read (a real one is a few hundred bytes).
MAX_RECEIPT = 256 * 1024


#: A harness name as a plugin's distribution can carry it.
HARNESS_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def is_harness_name(word: str) -> bool:
    return HARNESS_NAME.fullmatch(word) is not None


def normalized(name: str) -> str:
    """A distribution name as package indexes compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def dist_name(harness: str) -> str:
    """The distribution of *harness*'s plugin."""
    return DIST_PREFIX + harness


@attrs.frozen
class Command:
    """A command line to run, with the variables it needs set."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def shown(self) -> str:
        """The command as one shell line a user can paste."""
        prefix = "".join(f"{key}={shlex.quote(value)} " for key, value in self.env)
        return prefix + shlex.join(self.argv)


@attrs.frozen
class Requirement:
    """One requirement of a uv tool's receipt, as ``uv tool install`` takes it back."""

    name: str
    #: The words that name it on a command line (a path, or ``name[extras]>=1``).
    word: str
    editable: bool = False


@attrs.frozen
class Route:
    """The installer that owns the environment this fm runs from."""

    kind: str
    #: The environment (``sys.prefix``).
    prefix: Path
    #: This environment's interpreter.
    python: str
    #: The pipx venv's or uv tool's name ("" for pip).
    name: str = ""
    #: The distribution the pipx venv or uv tool was made for (normalised; "" for pip).
    main: str = ""
    #: A uv tool's requirements, its main one first.
    requirements: tuple[Requirement, ...] = ()
    #: The ``--python`` a uv tool was installed with ("" when none was given).
    uv_python: str = ""
    #: Variables the installer needs set (a pipx home other than the one pipx would pick).
    env: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        if self.kind == PIPX:
            return f"pipx venv {self.name} ({self.prefix})"
        if self.kind == UV_TOOL:
            return f"uv tool {self.name} ({self.prefix})"
        return f"the Python environment {self.prefix}"

    def owns(self, dist: str) -> bool:
        """Whether *dist* is what this pipx venv or uv tool was installed for (removing it
        would remove fm itself)."""
        return bool(self.main) and normalized(dist) == self.main

    def add(self, spec: str, dist: str) -> Command:
        """The command that installs *spec* (a distribution name, a wheel, an sdist or a project
        directory) whose distribution is *dist* into this environment."""
        if self.kind == PIPX:
            return Command((PIPX, "inject", self.name, spec), self.env)
        if self.kind == UV_TOOL:
            kept = [r for r in self.requirements[1:] if normalized(r.name) != normalized(dist)]
            return self._uv_install([*kept, Requirement(dist, spec)])
        return self._pip("install", spec)

    def remove(self, dist: str) -> Command:
        """The command that takes the distribution *dist* out of this environment."""
        if self.owns(dist):
            raise UsageError(
                f"{dist} is the package this fm was installed with ({self.describe()}); "
                f"removing it removes fm: run {self._uninstall_all()} to remove both")
        if self.kind == PIPX:
            return Command((PIPX, "uninject", self.name, dist), self.env)
        if self.kind == UV_TOOL:
            return self._uv_install([r for r in self.requirements[1:]
                                     if normalized(r.name) != normalized(dist)])
        return self._pip("uninstall", dist)

    def _uninstall_all(self) -> str:
        if self.kind == PIPX:
            return Command((PIPX, "uninstall", self.name), self.env).shown()
        return shlex.join(("uv", "tool", "uninstall", self.name))

    def _uv_install(self, extra: Sequence[Requirement]) -> Command:
        main = self.requirements[0]
        words = ["uv", "tool", "install", *(("--python", self.uv_python) if self.uv_python else ())]
        words += ["--editable", main.word] if main.editable else [main.word]
        for requirement in extra:
            words += ["--with-editable" if requirement.editable else "--with", requirement.word]
        return Command(tuple(words))

    def _pip(self, verb: str, *words: str) -> Command:
        """pip of this environment; ``uv pip`` aimed at it when it has no pip and uv is here."""
        if self.prefix == Path(sys.prefix) and importlib.util.find_spec("pip") is None \
                and _which("uv"):
            return Command(("uv", "pip", verb, "--python", self.python, *words))
        confirm = ("-y",) if verb == "uninstall" else ()
        return Command((self.python, "-m", "pip", verb, *confirm, *words))


def _which(program: str, env: Mapping[str, str] | None = None) -> str | None:
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    return shutil.which(program, path=path)


def detect(prefix: str | os.PathLike[str] | None = None, python: str | None = None,
           env: Mapping[str, str] | None = None) -> Route:
    """The route of the environment *prefix* (default: this interpreter's)."""
    env = os.environ if env is None else env
    root = Path(os.path.abspath(prefix if prefix is not None else sys.prefix))
    interpreter = os.path.abspath(python if python is not None else sys.executable)
    if (root / PIPX_MARK).is_file():
        return Route(PIPX, root, interpreter, name=root.name, main=_pipx_main(root),
                     env=_pipx_home(root, env))
    if (root / UV_MARK).is_file():
        requirements, uv_python = _receipt(root / UV_MARK)
        return Route(UV_TOOL, root, interpreter, name=root.name,
                     main=normalized(requirements[0].name), requirements=requirements,
                     uv_python=uv_python)
    return Route(PIP, root, interpreter)


def located(env: Mapping[str, str] | None = None,
            prefix: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """The environment *prefix* (default: this fm's) and how to name it, also when its
    installer's records cannot be read (fm plugin add and remove say why; a listing or an error
    message still names it)."""
    try:
        route = detect(prefix, env=env)
    except FirstmateError:
        root = Path(os.path.abspath(prefix if prefix is not None else sys.prefix))
        return root, f"the Python environment {root}"
    return route.prefix, route.describe()


def _pipx_main(root: Path) -> str:
    import json

    try:
        with (root / PIPX_MARK).open("rb") as fh:
            data = json.loads(fh.read(MAX_RECEIPT))
        main = data["main_package"]["package"]
    except (OSError, ValueError, KeyError, TypeError):
        return normalized(root.name)  # pipx names a venv after its main package
    return normalized(str(main))


def pipx_homes(env: Mapping[str, str]) -> list[Path]:
    """Where pipx keeps its venvs by default (``<home>/venvs``): ``PIPX_HOME`` when set, else
    the user data directory and the older ``~/.local/pipx``."""
    if env.get("PIPX_HOME"):
        return [Path(env["PIPX_HOME"])]
    user = Path(env.get("HOME") or os.path.expanduser("~"))
    data = Path(env["XDG_DATA_HOME"]) if env.get("XDG_DATA_HOME") else user / ".local/share"
    return [data / "pipx", user / ".local/pipx"]


def _pipx_home(root: Path, env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``PIPX_HOME`` for a venv that is not under the home pipx would use by itself."""
    home = root.parent.parent
    if root.parent.name != "venvs":
        return ()
    for known in pipx_homes(env):
        try:
            if os.path.samefile(known, home):
                return ()
        except OSError:
            continue
    return (("PIPX_HOME", str(home)),)


#: Receipt keys that change what ``uv tool install`` resolves: one we cannot repeat is refused
#: rather than dropped.
_UNREPEATABLE = ("constraints", "overrides", "build-constraint-dependencies")


def _receipt(path: Path) -> tuple[tuple[Requirement, ...], str]:
    fix = (f"add the plugin yourself: uv tool install <this tool's requirements> --with "
           f"{DIST_PREFIX}<harness>")
    try:
        with path.open("rb") as fh:
            tool = tomllib.loads(fh.read(MAX_RECEIPT).decode("utf-8"))["tool"]
        raw = tool["requirements"]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise FirstmateError(f"cannot read uv's receipt {path} ({type(exc).__name__}); {fix}") \
            from None
    if not isinstance(raw, list) or not raw:
        raise FirstmateError(f"uv's receipt {path} lists no requirements; {fix}")
    for key in _UNREPEATABLE:
        if tool.get(key):
            raise FirstmateError(f"this uv tool was installed with {key}, which fm plugin add "
                                 f"cannot repeat; {fix}")
    python = tool.get("python")
    return tuple(_requirement(entry, path, fix) for entry in raw), \
        str(python) if isinstance(python, str) else ""


def _requirement(entry: object, path: Path, fix: str) -> Requirement:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise FirstmateError(f"uv's receipt {path} holds a requirement fm cannot read; {fix}")
    name: str = entry["name"]
    extras = entry.get("extras") or []
    marker = entry.get("marker")
    if entry.get("git") or entry.get("subdirectory"):
        raise FirstmateError(f"uv's receipt {path} names {name} by a source fm plugin add "
                             f"cannot repeat; {fix}")
    for key in ("path", "directory"):
        if isinstance(entry.get(key), str):
            return Requirement(name, entry[key], editable=bool(entry.get("editable")))
    if isinstance(entry.get("editable"), str):
        return Requirement(name, entry["editable"], editable=True)
    word = name + (f"[{','.join(map(str, extras))}]" if extras else "")
    if isinstance(entry.get("url"), str):
        word += f" @ {entry['url']}"
    elif isinstance(entry.get("specifier"), str):
        word += entry["specifier"]
    if isinstance(marker, str) and marker:
        word += f" ; {marker}"
    return Requirement(name, word)


__all__ = ["DIST_PREFIX", "HARNESS_NAME", "PIP", "PIPX", "PIPX_MARK", "UV_MARK", "UV_TOOL", "Command",
           "Requirement", "Route", "detect", "dist_name", "is_harness_name", "located", "normalized",
           "pipx_homes"]
