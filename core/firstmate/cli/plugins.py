"""``fm plugins [--json] [--require NAME…]``: what is installed, and what failed to load."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping

import attrs

from firstmate.base.exitcodes import ExitCode


def main(argv: list[str]) -> int:
    from firstmate.base.errors import UsageError
    from firstmate.plugin.manager import load, require

    parser = argparse.ArgumentParser(prog="fm plugins", exit_on_error=False, add_help=True)
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.add_argument("--require", action="append", default=[], metavar="NAME",
                        help="exit 5 unless this harness plugin is loaded (repeatable)")
    try:
        args = parser.parse_args(argv)
    except argparse.ArgumentError as exc:
        raise UsageError(f"fm plugins: {exc}") from exc
    host = load()
    infos = host.harnesses()
    missing = require(host, args.require)
    if args.json:
        payload = {
            "plugins": [{**attrs.asdict(info), "version": host.versions.get(info.name, "")} for info in infos],
            "failures": [attrs.asdict(failure) for failure in host.failures],
            "missing": missing,
        }
        # (Declared mappings are read-only views: shown as the objects they are.)
        sys.stdout.write(json.dumps(payload, sort_keys=True,
                                    default=lambda v: dict(v) if isinstance(v, Mapping) else str(v))
                         + "\n")
    else:
        if not infos:
            sys.stdout.write("no harness plugins installed (pip install firstmate-plugin-<harness>)\n")
        for info in infos:
            version = host.versions.get(info.name, "")
            sys.stdout.write(f"{info.name}\t{version}\t{info.family}\tre-arm: {info.rearm_owner}\t{info.display_name}\n")
        for failure in host.failures:
            sys.stderr.write(f"fm plugins: {failure.name} failed to load: {failure.error}\n")
        for name in missing:
            sys.stderr.write(f"fm plugins: required plugin {name!r} is not loaded; pip install firstmate-plugin-{name}\n")
    if missing:
        return ExitCode.PLUGIN
    return ExitCode.OK
