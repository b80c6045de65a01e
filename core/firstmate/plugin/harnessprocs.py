"""Which harness a process is: the table of what the installed harness plugins declare
(process names, package markers, ``python -m`` modules, session anchors), and the matching of a
process's command line against it. Core knows no harness by name; this is where the session
lock learns them, from the plugins.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence

import attrs

from firstmate.base.names import HARNESS_NAMES_ENV
from firstmate.store.identity import DEFAULT_MAX_HOPS, ProcInfo, ancestry

#: Extra harness process basenames, comma-separated (for tests and unusual installs).


@attrs.frozen
class HarnessTable:
    """How to tell a harness process by its command line: what each installed harness plugin
    declares in its :class:`~firstmate.plugin.harness.HarnessInfo` (core knows no harness itself)."""

    #: Program basenames that are a harness themselves (basename -> harness).
    names: Mapping[str, str] = attrs.field(factory=dict)
    #: Consecutive path components that mark a script as a harness's own code.
    markers: tuple[tuple[tuple[str, ...], str], ...] = ()
    #: ``python -m <module>`` modules that are a harness.
    modules: Mapping[str, str] = attrs.field(factory=dict)
    #: (harness, pid variable, session-id variable) of each harness that vouches for its
    #: session in its hooks' environment.
    anchors: tuple[tuple[str, str, str], ...] = ()

    @classmethod
    def of(cls, infos: Iterable[object]) -> HarnessTable:
        names: dict[str, str] = {}
        markers: list[tuple[tuple[str, ...], str]] = []
        modules: dict[str, str] = {}
        anchors: list[tuple[str, str, str]] = []
        for info in infos:
            harness = str(getattr(info, "name", ""))
            names.update({n: harness for n in getattr(info, "process_names", ())})
            markers += [(tuple(m), harness) for m in getattr(info, "package_markers", ())]
            modules.update({m: harness for m in getattr(info, "python_modules", ())})
            anchor = getattr(info, "session_anchor", None)
            if anchor is not None:
                anchors.append((harness, anchor.pid_env, anchor.session_env))
        return cls(names, tuple(markers), modules, tuple(anchors))

    def with_extra(self, env: Mapping[str, str]) -> HarnessTable:
        """This table plus ``FM_HARNESS_PROCESS_NAMES`` (each name its own harness)."""
        extra = {n.strip(): n.strip() for n in env.get(HARNESS_NAMES_ENV, "").split(",")
                 if n.strip()}
        return attrs.evolve(self, names={**extra, **self.names}) if extra else self


_TABLES: dict[str, HarnessTable] = {}


def harness_table(env: Mapping[str, str] | None = None, *, only: str = "") -> HarnessTable:
    """The table of the installed harness plugins (loaded once per process and plugin
    selection), plus ``FM_HARNESS_PROCESS_NAMES``. With *only*, just that harness's, asking
    only its own plugin (no entry-point scan: the cheap way to check one recorded holder)."""
    env = os.environ if env is None else env
    from firstmate.base.names import DISABLE_PLUGINS_ENV, PLUGINS_ENV

    selection = (f"{env.get(PLUGINS_ENV, '')}|{env.get(DISABLE_PLUGINS_ENV, '')}"
                 f"|{only}")
    table = _TABLES.get(selection)
    if table is None:
        from firstmate.plugin.manager import load, load_harness

        try:
            infos = (load_harness(only, env) if only else load(env, core=False)).harnesses()
        except Exception:  # a missing or broken plugin must not make every process unknown
            infos = []
        table = _TABLES[selection] = HarnessTable.of(
            [i for i in infos if not only or getattr(i, "name", "") == only])
    return table.with_extra(env)


_INTERPRETER = re.compile(r"(node|nodejs|bun|deno|tsx|python(\d+(\.\d+)?)?|pypy3?)")
_EVAL_OPTIONS = frozenset({"-c", "-e", "-p", "--eval", "--print"})
_VALUE_OPTIONS = frozenset(
    {"-r", "--require", "--import", "--loader", "--experimental-loader", "-X", "-W",
     "--title", "--env-file", "--preload", "--cwd", "--config"}
)
_SUBCOMMANDS = frozenset({"run"})


def _parts(path: str) -> list[str]:
    return [p for p in re.split(r"[\\/]+", path) if p]


def _base(path: str) -> str:
    parts = _parts(path)
    base = parts[-1] if parts else ""
    return base[:-4] if base.lower().endswith(".exe") else base


def _versioned(parts: Sequence[str], names: Mapping[str, str]) -> str | None:
    # A versioned install: ``…/<name>/versions/2.1.220``, ``…/<name>/versions/<v>/node``.
    for i in range(len(parts) - 2):
        if parts[i + 1] == "versions" and parts[i] in names:
            return names[parts[i]]
    return None


def _script_harness(script: str, table: HarnessTable) -> str | None:
    names = table.names
    parts = _parts(script)
    if not parts:
        return None
    if parts[-1] in names:
        return names[parts[-1]]
    for marker, harness in table.markers:
        n = len(marker)
        if any(tuple(parts[i : i + n]) == marker for i in range(len(parts) - n + 1)):
            return harness
    return _versioned(parts, names)


def _interpreted_harness(args: Iterable[str], table: HarnessTable) -> str | None:
    """The harness an interpreter command line runs (``node …/cli.js``, ``python -m <module>``)."""
    it = iter(args)
    for arg in it:
        if arg in _EVAL_OPTIONS:
            return None
        if arg == "-m":
            module = next(it, "").split(".")[0]
            return table.modules.get(module)
        if arg in _VALUE_OPTIONS:
            next(it, None)
            continue
        if arg.startswith("-") or arg in _SUBCOMMANDS:
            continue
        return _script_harness(arg, table)
    return None


def harness_of(info: ProcInfo, env: Mapping[str, str] | None = None,
               table: HarnessTable | None = None) -> str | None:
    """Which harness *info* is, by the *table* (default: what the installed plugins declare,
    :func:`harness_table`), or None.

    Names are matched as whole basenames or path components, never as substrings, so a
    harness named ``pi`` does not match ``pip``, ``pipx`` or ``api-server``.
    """
    table = harness_table(env) if table is None else table
    names = table.names
    argv0 = info.cmdline[0] if info.cmdline else ""
    programs = [b for b in (info.name, _base(argv0), _base(info.exe)) if b]
    for base in programs:
        if base in names:
            return names[base]
    for path in (info.exe, argv0):
        found = _versioned(_parts(path), names) if path else None
        if found:
            return found
    if any(_INTERPRETER.fullmatch(b) for b in programs):
        return _interpreted_harness(info.cmdline[1:], table)
    return None


def innermost_harness(
    pid: int | None = None, max_hops: int = DEFAULT_MAX_HOPS
) -> ProcInfo | None:
    """The closest process in *pid*'s ancestry (itself included) that is a harness."""
    env = dict(os.environ)
    for info in ancestry(pid, max_hops):
        if harness_of(info, env) is not None:
            return info
    return None


__all__ = ["HARNESS_NAMES_ENV", "HarnessTable", "harness_of", "harness_table", "innermost_harness"]
