"""What ``fm doctor`` must know about a Claude Code install beyond a dry run: Claude runs every
registration of a hook, so ours registered twice means every turn end parks two hook processes.

Two ways that happens: the hooks in both ``.claude/settings.local.json`` and the project's
``.claude/settings.json`` (where older fm versions wrote them, with this machine's paths, into
the file the project commits: the next ``fm install claude`` moves them), or the Firstmate
plugin for Claude Code (``claude_plugin/``, installed from the marketplace) enabled while the
hooks are also in the settings.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path

import attrs
from firstmate.api import HookInstallSpec, InstallOptions, InstallProblem, uninstall_hooks

#: The plugin's name in its ``.claude-plugin/plugin.json`` (``enabledPlugins`` keys it as
#: ``<name>@<marketplace>``).
PLUGIN_NAME = "firstmate"


def _command(verb: str, options: InstallOptions) -> str:
    words = ["fm", verb, options.harness, "--project", str(options.project)]
    if options.home is not None:
        words += ["--home", str(options.home)]
    return shlex.join(words)


def _settings_files(project: Path, env: Mapping[str, str]) -> list[Path]:
    config = Path(env.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude"))
    return [config / "settings.json", project / ".claude" / "settings.json",
            project / ".claude" / "settings.local.json"]


def enabled_plugin(project: Path, env: Mapping[str, str]) -> tuple[str, Path] | None:
    """``(key, settings file)`` of an enabled Firstmate plugin for Claude Code, if any."""
    for file in _settings_files(project, env):
        try:
            doc = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        enabled = doc.get("enabledPlugins") if isinstance(doc, dict) else None
        if not isinstance(enabled, dict):
            continue
        for key, on in enabled.items():
            if on is True and isinstance(key, str) and key.split("@", 1)[0] == PLUGIN_NAME:
                return key, file
    return None


def problems(options: InstallOptions, spec: HookInstallSpec,
             shared: HookInstallSpec,
             env: Mapping[str, str] | None = None) -> list[InstallProblem]:
    """*spec* is the install's, *shared* the same hooks in the project's committed settings;
    *options* are the recorded install's."""
    env = os.environ if env is None else env
    found: list[InstallProblem] = []
    probe = uninstall_hooks(shared, attrs.evolve(options, dry_run=True))
    if probe.changed:
        found.append(InstallProblem(
            f"its hooks are in {shared.path}, the settings file the project commits (an older "
            f"fm put them there, with this machine's paths): fm install {options.harness} moves "
            f"them to {spec.path}",
            _command("install", options), paths=(options.project / shared.path,)))
    plugin = enabled_plugin(options.project, env)
    if plugin is not None:
        key, file = plugin
        found.append(InstallProblem(
            f"the Firstmate plugin for Claude Code is enabled ({key} in {file}) and the hooks are "
            f"also in {spec.path}: each hook would run twice",
            _command("uninstall", options) + f"   # or disable {key} with /plugin"))
    return found


__all__ = ["PLUGIN_NAME", "enabled_plugin", "problems"]
