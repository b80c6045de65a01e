"""``fm host …``: the opt-in supervision host (park in place of the arm, engine outcome reports)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from firstmate.cli.args import Parser
from firstmate.store.home import Home


def parser() -> Parser:
    parser = Parser("fm host", "The opt-in supervision host: parked in place of fm arm, it "
                    "handles each close with a bounded headless engine turn while the captain "
                    "is away (docs/guards.md).")
    park = parser.add_command("park", "run in place of fm arm (attended: exactly an arm; away: "
                              "engine turns handle the wakes)")
    park.add_argument("--restart", action="store_true",
                      help="stop the current watcher first, as fm arm --restart does")
    report = parser.add_command("report", "record one branch outcome (the engine turn runs this)")
    report.add_argument("--captain", action="store_true",
                        help="the outcome needs the captain: it goes into the return brief's "
                             "captain section")
    report.add_argument("--generation", metavar="G",
                        help="the episode generation handled (default: "
                             "$FM_SUPERVISION_HOST_GENERATION)")
    report.add_argument("text", nargs="*", metavar="TEXT", help="the outcome (words are joined)")
    enable = parser.add_command("enable", "write config/supervision-host (the engine is "
                                "stored with an HMAC under the home's secret)")
    enable.add_argument("--engine", metavar="CMD",
                        help="the headless one-turn command line to run (default: the harness "
                             "plugin's host_engine)")
    enable.add_argument("--handback", choices=("default", "acknowledged"),
                        help="acknowledged: re-deliver a handed-back wake with backoff until "
                             "main acknowledges it")
    parser.add_command("disable", "remove config/supervision-host")
    status = parser.add_command("status", "enabled or not, the engine, whether a host is parked, "
                                "away or not")
    status.add_argument("--json", action="store_true",
                        help="print one JSON object: enabled, engine, turn_timeout, handback, "
                             "parked, away")
    return parser


def _home() -> Home:
    from firstmate.store.home import resolve_root

    return Home(resolve_root(os.environ))


def main(argv: Sequence[str]) -> int:
    args = parser().parse(argv)
    verb = args.command
    from firstmate.host import supervision as host

    if verb == "park":
        return host.park(restart=args.restart)
    if verb == "report":
        generation = args.generation or os.environ.get(host.GENERATION_ENV, "")
        host.report(_home(), " ".join(args.text), generation.strip(), captain=args.captain)
        return 0
    if verb == "enable":
        from firstmate.store.home import open_home

        home = open_home(os.environ)
        host.enable(home, args.engine, args.handback)
        sys.stdout.write(f"supervision host: enabled ({home.config / host.CONFIG_NAME}); it "
                         "handles wakes only while away (fm away on)\n")
        return 0
    if verb == "disable":
        done = host.disable(_home())
        sys.stdout.write("supervision host: disabled\n" if done
                         else "supervision host: already disabled\n")
        return 0
    if verb == "status":
        from firstmate.host import away

        home = _home()
        config = host.load_config(home)
        pid, live = away.away_owner(home)
        data = {"enabled": config.enabled, "engine": list(config.engine),
                "turn_timeout": config.turn_timeout, "handback": config.handback,
                "parked": {"pid": pid, "live": live}, "away": away.is_away(home)}
        if args.json:
            from firstmate.cli import jsonout

            jsonout.write(data)
        else:
            state = f"parked (pid {pid})" if live else "not parked"
            engine = " ".join(config.engine) or f"none (set {host.ENGINE_ENV})"
            sys.stdout.write(
                f"supervision host: {'enabled' if config.enabled else 'disabled'}, {state}, "
                f"away {'on' if data['away'] else 'off'}\nengine: {engine}\n")
    return 0
