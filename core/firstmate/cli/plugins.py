"""``fm plugins [--json] [--require NAME…]``: what is installed, and what failed to load."""

from __future__ import annotations

import sys

import attrs

from firstmate.base.exitcodes import ExitCode
from firstmate.cli.args import Parser


def parser() -> Parser:
    parser = Parser("fm plugins", "List the installed harness plugins (name, version, family, "
                    "re-arm owner) and any that failed to load.")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: plugins, failures, missing")
    parser.add_argument("--require", action="append", default=[], metavar="NAME",
                        help="exit 5 unless the plugin for harness NAME is loaded (repeatable)")
    return parser


def main(argv: list[str]) -> int:
    from firstmate.plugin.manager import load, require

    args = parser().parse(argv)
    host = load()
    infos = host.harnesses()
    missing = require(host, args.require)
    if args.json:
        from firstmate.cli import jsonout

        jsonout.write({
            "plugins": [{**attrs.asdict(info), "version": host.versions.get(info.name, "")} for info in infos],
            "failures": [attrs.asdict(failure) for failure in host.failures],
            "missing": missing,
        })
    else:
        if not infos:
            sys.stdout.write("no harness plugins installed (pip install firstmate-plugin-<harness>)\n")
        for info in infos:
            version = host.versions.get(info.name, "")
            sys.stdout.write(f"{info.name}\t{version}\t{info.family}\tre-arm: {info.rearm_owner}\t{info.display_name}\n")
        for failure in host.failures:
            error = " ".join(failure.error.split())
            sys.stderr.write(f"fm: plugin {failure.name} failed to load ({error}); reinstall it: "
                             f"pip install --force-reinstall firstmate-plugin-{failure.name}\n")
        for name in missing:
            sys.stderr.write(f"fm: required plugin {name!r} is not loaded; install it: "
                             f"pip install firstmate-plugin-{name}\n")
    if missing:
        return ExitCode.PLUGIN
    return ExitCode.OK
