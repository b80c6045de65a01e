"""Install and remove an in-process harness's shim (Pi, omp, OpenCode): files written whole.

A shim install is three files: the shim the harness loads (its first lines carry a marker that
proves it ours), the shared bridge client it imports (``firstmate/shims/bridge-client.mjs``) and
``launch.json``, the ``fm bridge <harness>`` argv for this machine's Python. Every file is
Firstmate's entirely, so there is nothing to merge: an install replaces them, an uninstall
deletes them and prunes the directories it leaves empty. A shim path that holds a file without
the marker is somebody else's and is refused, never overwritten.

``--npm-package=DIR`` writes the same shim and client with a ``package.json`` into DIR instead, for
the harness's own package installer; there is no ``launch.json`` (a published package cannot
know this machine's Python), so the shim falls back to ``FIRSTMATE_BRIDGE_ARGV``, then to ``fm``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from firstmate.base.errors import FirstmateError, UsageError
from firstmate.base.exitcodes import ExitCode
from firstmate.plugin import filestage
from firstmate.plugin.configfiles import (
    ConfigFileError,
    install_result,
    read_config,
    require_project,
    update_text,
)
from firstmate.plugin.harness import (
    FileChange,
    InstallFlag,
    InstallOptions,
    InstallResult,
    read_only,
)

NPM_FLAG = "npm-package"
#: How far into the shim its marker must appear.
MARKER_WINDOW = 300


class ShimMissing(FirstmateError):
    """A file the install copies is missing from the installed Python packages."""

    exit_code = ExitCode.PLUGIN


@attrs.frozen
class ShimSpec:
    """Where one harness's shim comes from and where it goes."""

    harness: str
    #: The Python package and the path inside it of the shim source.
    package: str
    resource: str
    #: Words within the shim's first lines: a file at the shim path without them is not ours.
    marker: str
    #: Project-relative path of the installed shim, and the directory of its client and launch.json.
    shim: str
    support: str
    #: Package-relative path of the shim in the npm layout (the client goes beside it).
    npm_shim: str
    #: ``package.json`` fields beyond name, version, description, type, files and license.
    npm_fields: Mapping[str, Any] = attrs.field(factory=dict, converter=read_only, hash=False)
    #: Said after an install that changed something.
    load_note: str = ""
    #: Said after an npm-layout install; ``{package}`` is the directory.
    npm_note: str = ""

    @property
    def npm_name(self) -> str:
        return f"firstmate-{self.harness}"

    @property
    def distribution(self) -> str:
        return f"firstmate-plugin-{self.harness}"

    def owned_files(self) -> tuple[str, ...]:
        """The project-relative files an install writes, the shim first (``HarnessInfo``)."""
        return (self.shim, f"{self.support}/bridge-client.mjs", f"{self.support}/launch.json")


def npm_package_flag(what: str) -> InstallFlag:
    """The ``--npm-package=DIR`` flag every shim install takes (declare it in the plugin's
    ``HarnessInfo.install_flags``), *what* saying what goes into DIR for this harness."""
    return InstallFlag(NPM_FLAG, f"write {what} into DIR instead of the project (for the "
                       "harness's own package installer; no launch.json)", "DIR")


# --- what the files say -------------------------------------------------------------------------


def resource_text(package: str, relative: str, harness: str) -> str:
    from importlib import resources

    node = resources.files(package)
    for part in relative.split("/"):
        node = node / part
    try:
        return node.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise ShimMissing(f"{package} has no {relative}; reinstall {package.replace('_', '-')} "
                          f"and rerun fm install {harness}") from exc


#: The one crew extension the harnesses with a Pi-style extension API (``on("agent_end", …)``)
#: load in crew mode, shipped with core like the bridge client; :data:`TURN_ENDED_PLACEHOLDER`
#: in it becomes the crew's ``fm crew turn-ended NAME`` argv (a JSON array).
CREW_EXTENSION = "shims/crew-extension.ts"
TURN_ENDED_PLACEHOLDER = "__FM_TURN_ENDED_ARGV__"


def crew_extension(harness: str, turn_ended_argv: Sequence[str]) -> str:
    """The crew extension's source for *harness*, recording turn ends with *turn_ended_argv*."""
    return resource_text("firstmate", CREW_EXTENSION, harness).replace(
        TURN_ENDED_PLACEHOLDER, json.dumps(list(turn_ended_argv)))


def launch_argv(spec: ShimSpec, options: InstallOptions) -> list[str]:
    """The bridge command: this Python's ``-m firstmate`` (so the harness needs no ``fm`` on its
    PATH) unless ``--fm-command`` names another; ``--home`` is pinned when given."""
    from firstmate.plugin.fmcommand import own_argv

    words = shlex.split(options.fm_command) if options.fm_command != "fm" else own_argv()
    words += ["bridge", spec.harness]
    if options.home is not None:
        words += ["--home", str(options.home)]
    return words


def package_json(spec: ShimSpec) -> str:
    from importlib import metadata

    try:
        version = metadata.version(spec.distribution)
    except metadata.PackageNotFoundError:
        version = "0.0.0"
    top = spec.npm_shim.split("/", 1)[0]
    doc: dict[str, Any] = {
        "name": spec.npm_name,
        "version": version,
        "description": f"Firstmate supervision (talks to fm bridge {spec.harness})",
        "type": "module",
        "files": [top] if "/" in spec.npm_shim else [spec.npm_shim, "bridge-client.mjs"],
        "license": "MIT",
        **spec.npm_fields,
    }
    return json.dumps(doc, indent=2) + "\n"


# --- plans ------------------------------------------------------------------------------------


@attrs.frozen
class Planned:
    """One file written whole: where, and (lazily) what."""

    path: Path
    text: Callable[[], str]
    #: The file names this machine's paths (``launch.json``): never written into a file git
    #: tracks (firstmate.plugin.installkeep).
    personal: bool = False


def _shim_text(spec: ShimSpec) -> Callable[[], str]:
    return lambda: resource_text(spec.package, spec.resource, spec.harness)


def _client_text(spec: ShimSpec) -> Callable[[], str]:
    return lambda: resource_text("firstmate", "shims/bridge-client.mjs", spec.harness)


def project_plan(spec: ShimSpec, options: InstallOptions) -> list[Planned]:
    root = options.project
    support = root / spec.support
    return [
        Planned(root / spec.shim, _shim_text(spec)),
        Planned(support / "bridge-client.mjs", _client_text(spec)),
        Planned(support / "launch.json",
                lambda: json.dumps({"argv": launch_argv(spec, options)}, indent=2) + "\n",
                personal=True),
    ]


def npm_plan(spec: ShimSpec, directory: Path) -> list[Planned]:
    shim = directory / spec.npm_shim
    return [
        Planned(shim, _shim_text(spec)),
        Planned(shim.parent / "bridge-client.mjs", _client_text(spec)),
        Planned(directory / "package.json", lambda: package_json(spec)),
    ]


def npm_dir(spec: ShimSpec, options: InstallOptions) -> Path | None:
    value = options.flags.get(NPM_FLAG)
    if value is None:
        return None
    if value in ("", "true"):
        raise UsageError(f"--{NPM_FLAG} needs a directory: fm install {spec.harness} "
                         f"--{NPM_FLAG}=DIR")
    return Path(value).expanduser().absolute()


# --- ownership --------------------------------------------------------------------------------


def _read(path: Path) -> str | None:
    data = read_config(path)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"{path} is not UTF-8 text (byte {exc.start}); move it aside and "
                              "rerun", aside=path) from exc


def check_shim(spec: ShimSpec, path: Path) -> None:
    """Refuse a file at the shim path that is not our shim (another extension by that name)."""
    text = _read(path)
    if text is not None and spec.marker not in text[:MARKER_WINDOW]:
        raise ConfigFileError(f"{path} is not Firstmate's {spec.harness} shim; move it aside and "
                              f"rerun fm install {spec.harness}", aside=path)


def check_package(spec: ShimSpec, directory: Path) -> None:
    manifest = directory / "package.json"
    text = _read(manifest)
    if text is None:
        return
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict) or doc.get("name") != spec.npm_name:
        raise ConfigFileError(f"{manifest} belongs to another package; pass --{NPM_FLAG} an empty "
                              "directory")


# --- install and uninstall ----------------------------------------------------------------------


def _nothing(_text: str) -> str:
    return ""  # every planned file is wholly ours


def _replace_with(text: str) -> Callable[[str], str]:
    return lambda _old: text


def _write(planned: Sequence[Planned], dry_run: bool) -> list[FileChange]:
    # The shim imports the client: both (and launch.json) are in place, or none is.
    with filestage.transaction():
        return [update_text(item.path, _replace_with(item.text()), remove_ours=_nothing,
                            dry_run=dry_run, personal=item.personal)
                for item in planned]


def _remove(planned: Sequence[Planned], dry_run: bool, prune_upto: Path) -> list[FileChange]:
    with filestage.transaction():
        return [update_text(item.path, _nothing, remove_ours=_nothing, dry_run=dry_run,
                            delete_if_vacant=True, prune_upto=prune_upto)
                for item in planned]


def _planned(spec: ShimSpec, options: InstallOptions) -> tuple[list[Planned], Path, Path | None]:
    """The files, the directory pruning stops at, and the npm package directory (if any)."""
    package = npm_dir(spec, options)
    if package is not None:
        check_package(spec, package)
        plan = npm_plan(spec, package)
        check_shim(spec, plan[0].path)
        return plan, package.parent, package
    require_project(options)
    plan = project_plan(spec, options)
    check_shim(spec, plan[0].path)
    return plan, options.project, None


def install(spec: ShimSpec, options: InstallOptions) -> InstallResult:
    """``fm install <harness>`` for an in-process harness (idempotent; dry runs write nothing)."""
    plan, _prune, package = _planned(spec, options)
    changes = _write(plan, options.dry_run)
    if package is not None:
        notes = [spec.npm_note.format(package=package)] if spec.npm_note else []
    else:
        changed = any(c.action != "unchanged" for c in changes)
        notes = [spec.load_note] if changed and spec.load_note else []
    return install_result(spec.harness, changes, notes, options.dry_run)


def uninstall(spec: ShimSpec, options: InstallOptions) -> InstallResult:
    """``fm uninstall <harness>``: delete exactly the files :func:`install` writes, and the
    directories that held them while they are empty."""
    plan, prune, _package = _planned(spec, options)
    return install_result(spec.harness, _remove(plan, options.dry_run, prune), (),
                          options.dry_run)


__all__ = ["CREW_EXTENSION", "NPM_FLAG", "TURN_ENDED_PLACEHOLDER", "Planned", "ShimMissing",
           "ShimSpec", "check_package", "check_shim", "crew_extension", "install", "launch_argv", "npm_dir", "npm_package_flag", "npm_plan", "package_json",
           "project_plan", "resource_text", "uninstall"]
