"""``fm plugin add|remove|list``: the harness plugins of this fm's own environment.

fm loads only plugins installed where it is installed, so adding one means running the
installer that owns that environment (:mod:`firstmate.plugin.installroute`): the command is
printed, then run, and the plugin is checked from a fresh interpreter before fm says it is there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import attrs

from firstmate.base.errors import FirstmateError, UsageError
from firstmate.base.exitcodes import ExitCode
from firstmate.cli.args import Parser
from firstmate.plugin.installroute import (
    DIST_PREFIX,
    Command,
    Route,
    detect,
    is_harness_name,
    located,
    normalized,
)

_PREFIX = "fm plugin: "
#: What a local plugin can be given as.
_ARCHIVES = (".whl", ".tar.gz", ".zip")


def parser() -> Parser:
    parser = Parser("fm plugin", "Add, remove and list the harness plugins of this fm's own "
                    "environment. fm loads only plugins installed where it is, so add runs the "
                    "installer that owns it: pipx inject for a pipx venv, uv tool install "
                    "--with for a uv tool, else this Python's pip. The command is printed "
                    "before it runs.")
    add = parser.add_command("add", "install a harness plugin into this fm's environment with "
                             "the installer that owns it")
    add.add_argument("plugin", metavar="HARNESS|PATH",
                     help="a harness name (its plugin, firstmate-plugin-HARNESS, comes from the "
                          "package index) or a plugin's wheel, sdist or project directory")
    add.add_argument("--dry-run", action="store_true",
                     help="print the installer's command and run nothing")
    remove = parser.add_command("remove", "take a harness plugin out of this fm's environment "
                                "(the reverse of add)")
    remove.add_argument("harness", metavar="HARNESS", help="the harness whose plugin to remove")
    remove.add_argument("--dry-run", action="store_true",
                        help="print the installer's command and run nothing")
    listing = parser.add_command("list", "the plugins this fm loads, how fm was installed, and "
                                 "plugins installed in other environments on this machine")
    listing.add_argument("--json", action="store_true",
                         help="print one JSON object: fm, plugins, failures, elsewhere")
    return parser


def main(argv: list[str]) -> int:
    ns = parser().parse(argv)
    if ns.command == "list":
        return _list(ns.json)
    if ns.command == "add":
        return _add(ns.plugin, ns.dry_run)
    return _remove(ns.harness, ns.dry_run)


# --- what was named ----------------------------------------------------------------------------


@attrs.frozen
class Target:
    """A plugin to add: what the installer is given, its distribution and its harness."""

    spec: str
    dist: str
    harness: str


def _is_path(word: str) -> bool:
    return os.sep in word or word.startswith((".", "~")) or word.endswith(_ARCHIVES)


def _dist_of(path: Path) -> str | None:
    """The distribution a wheel, sdist or project directory holds (its file name or
    pyproject.toml says)."""
    if path.is_dir():
        try:
            with (path / "pyproject.toml").open("rb") as fh:
                name = tomllib.load(fh)["project"]["name"]
        except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError):
            return None
        return name if isinstance(name, str) else None
    name = path.name
    if name.endswith(".whl"):
        return name.split("-", 1)[0]
    for suffix in _ARCHIVES:
        if name.endswith(suffix):
            return name[: -len(suffix)].rpartition("-")[0] or None
    return None


def _harness_of(dist: str) -> str | None:
    name = normalized(dist)
    harness = name[len(DIST_PREFIX):] if name.startswith(DIST_PREFIX) else ""
    return harness if is_harness_name(harness) else None


def target(word: str) -> Target:
    """What ``fm plugin add WORD`` installs: a local plugin, or a harness's plugin by name."""
    if _is_path(word):
        path = Path(os.path.abspath(os.path.expanduser(word)))
        shown = str(path) if str(path).isprintable() else repr(str(path))
        if not path.exists():
            raise UsageError(f"no such file or directory: {shown}; give a harness name or a "
                             "plugin's wheel, sdist or project directory")
        dist = _dist_of(path)
        harness = _harness_of(dist) if dist else None
        if dist is None or harness is None:
            named = repr(dist[:64]) if dist else "not named in it"
            raise UsageError(f"{shown} is not a Firstmate plugin (its distribution is {named}); "
                             f"give a {DIST_PREFIX}HARNESS wheel, sdist or project directory")
        return Target(str(path), normalized(dist), harness)
    harness = _harness_of(word) or (word if is_harness_name(word) else None)
    if harness is None:
        raise UsageError(f"{word[:64]!r} is not a harness name: use lower-case letters, digits, "
                         "'.', '_' and '-' (or give a path to a plugin)")
    return Target(DIST_PREFIX + harness, DIST_PREFIX + harness, harness)


# --- running the installer -----------------------------------------------------------------------


def _installed(dist: str) -> str | None:
    """The version of *dist* in this environment, None when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _stderr() -> int | None:
    try:
        return sys.stderr.fileno()
    except (AttributeError, ValueError, OSError):
        return None  # (a caller's own stream) the installer's output stays on stdout


def _run(command: Command, dry_run: bool) -> None:
    shown = command.shown()
    sys.stdout.write(f"{_PREFIX}{'would run' if dry_run else 'running'}: {shown}\n")
    sys.stdout.flush()
    if dry_run:
        return
    # The installer's own output goes to stderr: stdout keeps only fm's lines.
    try:
        done = subprocess.run(command.argv, env={**os.environ, **dict(command.env)},
                              stdin=subprocess.DEVNULL, stdout=_stderr(), check=False)
    except FileNotFoundError:
        raise FirstmateError(f"{command.argv[0]} is not on PATH, so fm cannot run: {shown}; "
                             f"put {command.argv[0]} on PATH or run that yourself") from None
    if done.returncode != 0:
        raise FirstmateError(f"the installer failed (exit {done.returncode}): {shown}; its "
                             "output above says why; nothing else was changed")


#: Run in a fresh interpreter of this environment: the distribution's version and whether its
#: plugin entry points load (this process's import caches predate the install).
_PROBE = """\
import json, sys
from importlib.metadata import PackageNotFoundError, distribution
try:
    dist = distribution(sys.argv[1])
except PackageNotFoundError:
    print(json.dumps(None)); raise SystemExit
loaded, error = [], ""
for ep in dist.entry_points:
    if ep.group == sys.argv[2]:
        try:
            ep.load(); loaded.append(ep.name)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
print(json.dumps({"version": dist.version, "harnesses": loaded, "error": error}))
"""


def _probe(route: Route, dist: str) -> dict[str, object] | None:
    import json

    from firstmate.base.names import ENTRY_POINT_GROUP

    done = subprocess.run([route.python, "-c", _PROBE, dist, ENTRY_POINT_GROUP],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120,
                          check=False)
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise FirstmateError(f"cannot check {dist} in {route.describe()}: "
                             f"{' '.join(done.stderr.split())[-300:]}") from None
    return found if isinstance(found, dict) else None


def _add(word: str, dry_run: bool) -> int:
    chosen = target(word)
    route = detect()
    is_name = chosen.spec == chosen.dist
    present = _installed(chosen.dist)
    if is_name and present is not None:
        sys.stdout.write(f"{_PREFIX}{chosen.harness} is already installed ({chosen.dist} "
                         f"{present}, {route.describe()}); next: fm install {chosen.harness} "
                         "in your project\n")
        return ExitCode.OK
    _run(route.add(chosen.spec, chosen.dist), dry_run)
    if dry_run:
        return ExitCode.OK
    found = _probe(route, chosen.dist)
    if found is None:
        raise FirstmateError(f"the installer finished, but {chosen.dist} is not in this fm's "
                             f"environment ({route.describe()}); add it there by hand",
                             exit_code=ExitCode.PLUGIN)
    listed = found.get("harnesses")
    names = [str(name) for name in listed] if isinstance(listed, list) else []
    if found.get("error") or not names:
        raise FirstmateError(f"{chosen.dist} {found.get('version')} is installed but its plugin "
                             f"does not load ({found.get('error') or 'no plugin entry point'}); "
                             f"fm plugin list says more", exit_code=ExitCode.PLUGIN)
    sys.stdout.write(f"{_PREFIX}added {', '.join(names)} ({chosen.dist} {found.get('version')}) "
                     f"to {route.describe()}; next: fm install {names[0]} in your project\n")
    return ExitCode.OK


def _remove(word: str, dry_run: bool) -> int:
    from firstmate.base.suggest import did_you_mean

    chosen = target(word) if not _is_path(word) else None
    if chosen is None:
        raise UsageError("fm plugin remove takes a harness name, not a path")
    route = detect()
    if _installed(chosen.dist) is None:
        from importlib.metadata import distributions

        here = [_harness_of(d.metadata["Name"] or "") for d in distributions()]
        raise FirstmateError(
            f"{chosen.dist} is not installed in this fm's environment ({route.describe()}); "
            f"{did_you_mean(chosen.harness, [h for h in here if h])}fm plugin list shows what "
            "is", exit_code=ExitCode.PLUGIN)
    _run(route.remove(chosen.dist), dry_run)
    if not dry_run:
        sys.stdout.write(f"{_PREFIX}removed {chosen.harness} from {route.describe()}; projects "
                         f"where fm install {chosen.harness} wrote hooks still run them: fm "
                         f"uninstall {chosen.harness} there\n")
    return ExitCode.OK


# --- list --------------------------------------------------------------------------------------


def _list(as_json: bool) -> int:
    from firstmate import __version__
    from firstmate.cli import plugins
    from firstmate.plugin import elsewhere
    from firstmate.plugin.manager import load

    host = load()
    prefix, where = located()
    try:
        installer: str | None = detect().kind
    except FirstmateError:
        installer = None  # an unreadable receipt: add and remove say so; the list still lists
    loaded = {info.name for info in host.harnesses()}
    other = [found for found in elsewhere.find(os.environ, prefix) if found.harness not in loaded]
    if as_json:
        from firstmate.cli import jsonout

        jsonout.write({
            **plugins.as_json(host),
            "fm": {"version": __version__, "environment": str(prefix), "installer": installer},
            "elsewhere": [{"harness": f.harness, "version": f.version, "kind": f.kind,
                           "environment": str(f.environment),
                           "source": str(f.source) if f.source else None,
                           "command": f.command()} for f in other],
        })
        return ExitCode.OK
    sys.stdout.write(f"{_PREFIX}fm {__version__} in {where}; fm plugin add HARNESS|PATH "
                     "installs a plugin there\n")
    plugins.write(host)
    for found in other:
        sys.stdout.write(f"{_PREFIX}{found.harness} {found.version} is installed in "
                         f"{found.where()}, which this fm does not load; bring it here with: "
                         f"{found.command()}\n")
    return ExitCode.OK
