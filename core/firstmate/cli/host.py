"""``fm host …``: the opt-in supervision host (park in place of the arm, engine outcome reports)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from firstmate.base.errors import UsageError
from firstmate.store.home import Home

USAGE = ("usage: fm host park [--restart] | report [--captain] [--generation G] TEXT… | "
         "enable [--engine CMD] [--handback default|acknowledged] | disable | status [--json]")


def _home() -> Home:
    from firstmate.store.home import resolve_root

    return Home(resolve_root(os.environ))


def _options(args: Sequence[str], flags: Sequence[str], valued: Sequence[str]
             ) -> tuple[dict[str, str], list[str]]:
    opts: dict[str, str] = {}
    rest: list[str] = []
    words = list(args)
    i = 0
    while i < len(words):
        word = words[i]
        if word in flags:
            opts[word] = "1"
        elif word in valued:
            if i + 1 >= len(words):
                raise UsageError(f"{word} needs a value; {USAGE}")
            opts[word] = words[i + 1]
            i += 1
        elif word == "--":
            rest.extend(words[i + 1:])
            break
        elif word.startswith("--"):
            raise UsageError(f"unknown option {word[:40]!r}; {USAGE}")
        else:
            rest.append(word)
        i += 1
    return opts, rest


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE + "\n")
        return 0 if args else 2
    verb, rest = args[0], args[1:]
    from firstmate.host import supervision as host

    if verb == "park":
        if rest not in ([], ["--restart"]):
            raise UsageError(USAGE)
        return host.park(restart=rest == ["--restart"])
    if verb == "report":
        opts, words = _options(rest, ("--captain",), ("--generation",))
        generation = opts.get("--generation") or os.environ.get(host.GENERATION_ENV, "")
        host.report(_home(), " ".join(words), generation.strip(),
                    captain="--captain" in opts)
        return 0
    if verb == "enable":
        opts, words = _options(rest, (), ("--engine", "--handback"))
        if words or opts.get("--handback", "default") not in ("default", "acknowledged"):
            raise UsageError(USAGE)
        from firstmate.store.home import open_home

        home = open_home(os.environ)
        host.enable(home, opts.get("--engine"), opts.get("--handback"))
        sys.stdout.write(f"supervision host: enabled ({home.config / host.CONFIG_NAME}); it "
                         "handles wakes only while away (fm away on)\n")
        return 0
    if verb == "disable":
        if rest:
            raise UsageError(USAGE)
        done = host.disable(_home())
        sys.stdout.write("supervision host: disabled\n" if done
                         else "supervision host: already disabled\n")
        return 0
    if verb == "status":
        if rest not in ([], ["--json"]):
            raise UsageError(USAGE)
        from firstmate.host import away

        home = _home()
        config = host.load_config(home)
        pid, live = away.away_owner(home)
        data = {"enabled": config.enabled, "engine": list(config.engine),
                "turn_timeout": config.turn_timeout, "handback": config.handback,
                "parked": {"pid": pid, "live": live}, "away": away.is_away(home)}
        if rest:
            sys.stdout.write(json.dumps(data, sort_keys=True) + "\n")
        else:
            state = f"parked (pid {pid})" if live else "not parked"
            engine = " ".join(config.engine) or f"none (set {host.ENGINE_ENV})"
            sys.stdout.write(
                f"supervision host: {'enabled' if config.enabled else 'disabled'}, {state}, "
                f"away {'on' if data['away'] else 'off'}\nengine: {engine}\n")
        return 0
    raise UsageError(f"unknown host command {verb[:40]!r}; {USAGE}")
