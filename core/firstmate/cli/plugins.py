"""``fm plugins [--json] [--require NAME…]``: what is installed, and what failed to load."""

from __future__ import annotations

import shlex
import sys
from typing import Any

import attrs

from firstmate.base.exitcodes import ExitCode
from firstmate.cli.args import Parser
from firstmate.plugin.manager import PluginHost


def parser() -> Parser:
    parser = Parser("fm plugins", "List the installed harness plugins (name, version, family, "
                    "re-arm owner) and any that failed to load. fm plugin list says the same "
                    "for people, with how fm was installed and the plugins of other "
                    "environments.")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: plugins, failures, missing")
    parser.add_argument("--require", action="append", default=[], metavar="NAME",
                        help="exit 5 unless the plugin for harness NAME is loaded (repeatable)")
    return parser


def as_json(host: PluginHost) -> dict[str, Any]:
    """The loaded plugins and the failures, as ``--json`` shows them."""
    return {
        "plugins": [{**attrs.asdict(info), "version": host.versions.get(info.name, "")}
                    for info in host.harnesses()],
        "failures": [attrs.asdict(failure) for failure in host.failures],
    }


def write(host: PluginHost) -> None:
    """One line per loaded plugin on stdout; one per failure on stderr."""
    infos = host.harnesses()
    if not infos:
        sys.stdout.write("no harness plugins installed (fm plugin add HARNESS adds one)\n")
    for info in infos:
        version = host.versions.get(info.name, "")
        sys.stdout.write(f"{info.name}\t{version}\t{info.family}\tre-arm: {info.rearm_owner}\t"
                         f"{info.display_name}\n")
    for failure in host.failures:
        error = " ".join(failure.error.split())
        sys.stderr.write(f"fm: plugin {failure.name} failed to load ({error}); reinstall it: "
                         f"fm plugin remove {failure.name}, then fm plugin add {failure.name}\n")


def main(argv: list[str]) -> int:
    from firstmate.plugin.manager import load, require

    args = parser().parse(argv)
    host = load()
    missing = require(host, args.require)
    if args.json:
        from firstmate.cli import jsonout

        jsonout.write({**as_json(host), "missing": missing})
    else:
        write(host)
        for name in missing:
            word = shlex.quote("".join(c for c in name if c.isprintable()))
            sys.stderr.write(f"fm: required plugin {name!r} is not loaded; add it: "
                             f"fm plugin add {word}\n")
    if missing:
        return ExitCode.PLUGIN
    return ExitCode.OK
