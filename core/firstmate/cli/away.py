"""``fm away on|off|status|brief``: the away record, its posture contract and the return brief."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from firstmate.base.errors import UsageError
from firstmate.store.home import Home

USAGE = ("usage: fm away on [--note TEXT] | off | status [--json] | brief [--json]")


def _home(create: bool) -> Home:
    from firstmate.store.home import open_home, resolve_root

    return open_home(os.environ) if create else Home(resolve_root(os.environ))


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE + "\n")
        return 0 if args else 2
    verb, rest = args[0], args[1:]
    from firstmate.host import away

    if verb == "on":
        note = ""
        if rest[:1] == ["--note"] and len(rest) >= 2:
            note = " ".join(rest[1:])
        elif rest:
            raise UsageError(USAGE)
        home = _home(True)
        _, already = away.turn_on(home, note)
        if already:
            sys.stdout.write("away: already on\n")
        else:
            sys.stdout.write("away: on (check rows may now be granted to the supervision "
                             "branch; fm away brief shows what happened, fm away off ends it)\n")
        return 0
    if verb == "off":
        if rest:
            raise UsageError(USAGE)
        home = _home(False)
        was = away.turn_off(home) if home.state.is_dir() else None
        if was is None:
            sys.stdout.write("away: already off\n")
        else:
            sys.stdout.write("away: off (run fm away brief for what happened while away)\n")
        return 0
    as_json = rest == ["--json"]
    if rest and not as_json:
        raise UsageError(USAGE)
    home = _home(False)
    if verb == "status":
        found_record = away.read_record(home)
        owner = away.away_owner(home)
        if as_json:
            data: dict[str, object] = {
                "away": found_record is not None,
                "record": None if found_record is None
                else {**found_record.to_json(), "valid": found_record.valid},
                "owner": {"pid": owner[0], "live": owner[1]},
            }
            sys.stdout.write(json.dumps(data, sort_keys=True) + "\n")
        else:
            sys.stdout.write("".join(
                line + "\n" for line in away.status_lines(found_record, owner)))
        return 0
    if verb == "brief":
        found = away.brief(home)
        if as_json:
            sys.stdout.write(json.dumps(found.to_json(), sort_keys=True, default=str) + "\n")
        else:
            sys.stdout.write("".join(line + "\n" for line in found.lines()))
        return 0
    raise UsageError(f"unknown away command {verb[:40]!r}; {USAGE}")
