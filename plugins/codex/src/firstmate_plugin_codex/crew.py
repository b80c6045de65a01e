"""Codex as a crew: ``codex --no-daemon -c notify=[…] --add-dir <home> [ARGS] "<brief>"``.

Codex's ``notify`` program runs after every turn (``agent-turn-complete``), needs no hook trust,
and is set for the crew's session alone with ``-c`` on its command line (the user's and the
project's files stay as they are). It is given one JSON argument, so it runs ``fm crew
turn-ended NAME`` through ``sh -c``, which leaves that argument aside. ``--add-dir`` lets a
sandboxed crew write its reports into the home; ``--no-daemon`` leaves no app-server behind when
the crew's window closes. The project's Codex hooks and ``AGENTS.md`` protocol still load: in a
crew's session the hooks are inert (``FM_CREW`` is set) and ``fm checkpoint`` / ``fm arm``
refuse to arm.
"""

from __future__ import annotations

import json

from firstmate.api import CrewLaunch, CrewLaunchRequest

PROGRAM = "codex"
#: The spawner's own Codex sandbox markers, wrong for a crew that runs in its own window.
UNSET = ("CODEX_SANDBOX", "CODEX_SANDBOX_NETWORK_DISABLED")
NOTE = ("Codex asks whether to trust a directory it has not run in before: answer it in the "
        "crew's window the first time (fm crew attach {crew}). The crew's -c notify replaces a "
        "notify program of your own config for that session.")


def notify(request: CrewLaunchRequest) -> list[str]:
    """The crew's ``notify`` argv: ``fm crew turn-ended NAME`` (Codex's JSON argument is $1)."""
    command = "exec " + request.fm_command("crew", "turn-ended", request.crew)
    return ["/bin/sh", "-c", command, "firstmate-crew-notify"]


def launch(request: CrewLaunchRequest) -> CrewLaunch:
    # -c parses its value as TOML; a JSON array of strings is one.
    override = f"notify={json.dumps(notify(request))}"
    argv = (PROGRAM, "--no-daemon", "-c", override, "--add-dir", str(request.home),
            *request.extra_args, request.brief)
    return CrewLaunch(argv=argv, unset_env=UNSET, notes=(NOTE.format(crew=request.crew),))
