"""``fm mcp [--home DIR]``: serve the primary's actions as MCP tools over stdio (docs/mcp.md).

A harness starts it as an MCP server. It acts on the home ``fm`` would (``FM_HOME``, else the
project's home found from the directory the harness starts it in; ``--home DIR`` names one), as
the actor the environment names (``FM_SUPERVISION_ACTOR``, else ``main``: the primary). It says
on stderr which home, then speaks only MCP on stdout. Refused in a crew's session (``FM_CREW``):
its tools drain the primary's wakes and answer its crews. Needs the optional extra
(``pip install 'firstmate[mcp]'``); without it, one line says how to add it (exit 1).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from firstmate.base.errors import FirstmateError
from firstmate.plugin.mcpsdk import EXTRA, SDK_MAJOR, SDK_SPEC, how_to_add, sdk_missing

if TYPE_CHECKING:
    from firstmate.cli.args import Parser

#: What only the captain does through the server (a crew's session is refused).
CAPTAIN_ONLY = "acts on the wake queue and the crews through MCP tools"


def parser() -> Parser:
    from firstmate.cli.args import Parser

    parser = Parser("fm mcp", "Serve the primary's actions (fleet status, wake drain and "
                    "acknowledgement, crew list, peek, steer, answer, spawn, stop) as MCP tools "
                    "over stdio, for a harness to start as an MCP server. Needs pip install "
                    "'firstmate[mcp]'. See docs/mcp.md.")
    parser.add_argument("--home", metavar="DIR",
                        help="the home the tools act on (default: FM_HOME, else the project's "
                             "home found from the directory the server is started in)")
    return parser


def main(argv: Sequence[str]) -> int:
    ns = parser().parse(argv)
    if ns.home is not None and not ns.home.strip():
        raise parser().usage_error("--home needs a directory")
    from firstmate.base.quickgate import refuse_crew_session

    refuse_crew_session(os.environ, "mcp", CAPTAIN_ONLY)
    missing = sdk_missing()
    if missing is not None:
        raise FirstmateError(missing)
    if ns.home is not None:
        os.environ["FM_HOME"] = os.path.abspath(os.path.expanduser(ns.home))
    env = dict(os.environ)
    _announce(env, given=ns.home is not None)
    from firstmate.mcp.server import serve

    return serve(env)


def _announce(env: dict[str, str], *, given: bool) -> None:
    """Say on stderr which home the tools act on, and why (it is read again at every call)."""
    from firstmate.base.homeroot import locate, reason
    from firstmate.fast.wakeactor import ACTOR_ENV

    root, source, where = locate(env)
    why = "--home" if given else reason(root, source, where)
    actor = env.get(ACTOR_ENV, "").strip() or "main"
    sys.stderr.write(f"fm mcp: serving home {root} ({why}) as actor {actor[:40]!r} on stdio\n")
    sys.stderr.flush()


__all__ = ["CAPTAIN_ONLY", "EXTRA", "SDK_MAJOR", "SDK_SPEC", "how_to_add", "main", "parser",
           "sdk_missing"]
