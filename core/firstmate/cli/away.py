"""``fm away on|off|status|brief``: the away record, its posture contract and the return brief."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from firstmate.cli.args import Parser
from firstmate.store.home import Home


def parser() -> Parser:
    parser = Parser("fm away", "Away mode: while the captain is away a supervision branch may "
                    "handle check rows; the return brief says what happened meanwhile.")
    on = parser.add_command("on", "write the away record with its posture contract")
    on.add_argument("--note", nargs="+", metavar="TEXT", default=[],
                    help="a note kept with the record (several words are joined)")
    parser.add_command("off", "remove the away record; the period is kept for the brief")
    status = parser.add_command("status", "on or off, since when, the note, the away owner and "
                                "the contract")
    status.add_argument("--json", action="store_true",
                        help="print one JSON object: away, record, owner")
    brief = parser.add_command("brief", "the return brief: what the host handled and handed "
                               "back, branch outcomes, gaps, rows queued for main, open decisions")
    brief.add_argument("--json", action="store_true", help="print the brief as one JSON object")
    return parser


def _home(create: bool) -> Home:
    from firstmate.store.home import open_home, resolve_root

    return open_home(os.environ) if create else Home(resolve_root(os.environ))


def main(argv: Sequence[str]) -> int:
    args = parser().parse(argv)
    verb = args.command
    from firstmate.host import away

    if verb == "on":
        note = " ".join(args.note)
        home = _home(True)
        _, already = away.turn_on(home, note)
        if already:
            sys.stdout.write("away: already on\n")
        else:
            sys.stdout.write("away: on (check rows may now be granted to the supervision "
                             "branch; fm away brief shows what happened, fm away off ends it)\n")
        return 0
    if verb == "off":
        home = _home(False)
        was = away.turn_off(home) if home.state.is_dir() else None
        if was is None:
            sys.stdout.write("away: already off\n")
        else:
            sys.stdout.write("away: off (run fm away brief for what happened while away)\n")
        return 0
    as_json = args.json
    home = _home(False)
    from firstmate.cli import jsonout

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
            jsonout.write(data)
        else:
            sys.stdout.write("".join(
                line + "\n" for line in away.status_lines(found_record, owner)))
        return 0
    found = away.brief(home)
    if as_json:
        jsonout.write(found.to_json())
    else:
        sys.stdout.write("".join(line + "\n" for line in found.lines()))
    return 0
