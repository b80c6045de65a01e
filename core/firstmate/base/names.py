"""The project's names, in one stdlib-only place: what plugins register under, how their modules
are named, and the environment variables that select them. Hot paths import this freely."""

from __future__ import annotations

#: The pluggy project name (hook markers and the plugin manager).
PROJECT = "firstmate"
#: The entry-point group every harness plugin registers in.
ENTRY_POINT_GROUP = "firstmate.plugins"
#: The shipped plugins' naming: package ``firstmate_plugin_<harness>``, distribution
#: ``firstmate-plugin-<harness>``. Only names a distribution to install or describe: an installed
#: plugin is found by its entry point (firstmate.base.pluginindex), whatever its names.
PLUGIN_MODULE_PREFIX = "firstmate_plugin_"
#: The module holding the core's own defaults (its ``plugin``), registered in every plugin
#: manager under :data:`CORE_PLUGIN_NAME`, like any plugin and replaceable like one.
CORE_PLUGIN_MODULE = "firstmate.app.defaults"
CORE_PLUGIN_NAME = "firstmate-core"
#: Comma list: load only these plugins (``none`` loads none).
PLUGINS_ENV = "FIRSTMATE_PLUGINS"
#: Comma list: never load these plugins.
DISABLE_PLUGINS_ENV = "FIRSTMATE_DISABLE_PLUGINS"
#: Comma list: more process names, each recognised as a harness of that name
#: (firstmate.plugin.harnessprocs).
HARNESS_NAMES_ENV = "FM_HARNESS_PROCESS_NAMES"
#: Where the per-home secrets live (firstmate.base.keyring).
KEYS_DIR_ENV = "FIRSTMATE_KEYS_DIR"
#: How fm starts itself through its interpreter: ``-P`` keeps the working directory off
#: ``sys.path``. fm runs in project directories (hooks, arms, bridges), and ``python -m
#: firstmate`` would otherwise import a ``firstmate/`` package found there (a cloned
#: repository's) in place of this one.
MODULE_ARGS = ("-P", "-m", PROJECT)


def fm_module_argv(*args: str) -> list[str]:
    """This interpreter running fm with *args*, safe in any working directory."""
    import sys

    return [sys.executable, *MODULE_ARGS, *args]


#: The submodule of a plugin's package tried, after the package itself, for the ``quick_gate``
#: function: a plugin may keep its package ``__init__`` empty.
GATE_SUBMODULE = "gate"


__all__ = ["CORE_PLUGIN_MODULE", "CORE_PLUGIN_NAME", "DISABLE_PLUGINS_ENV", "ENTRY_POINT_GROUP",
           "GATE_SUBMODULE", "HARNESS_NAMES_ENV", "KEYS_DIR_ENV", "MODULE_ARGS", "PLUGINS_ENV",
           "PLUGIN_MODULE_PREFIX", "PROJECT", "fm_module_argv"]
