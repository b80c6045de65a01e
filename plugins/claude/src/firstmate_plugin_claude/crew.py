"""Claude Code as a crew: ``claude --settings <crew settings> [ARGS] "<brief>"``.

The crew's settings file lives in its launch directory and only its own session loads it
(``--settings`` adds a settings layer for that one session): a ``Stop`` and a ``StopFailure``
hook run ``fm crew turn-ended NAME`` (a turn that ends in an API error is a turn end the captain
should hear of too), and the crew's own status reports are allowed without a permission prompt.
The project's settings still load, the primary's hooks among them: they are inert in a crew's
session (``FM_CREW`` is set; see the quick gate).
"""

from __future__ import annotations

import json

from firstmate.api import CrewFile, CrewLaunch, CrewLaunchRequest

PROGRAM = "claude"
SETTINGS = "claude-settings.json"
#: The spawner's own Claude session variables: a crew started from a primary Claude's shell
#: must not look like (or refuse to start inside) that session.
UNSET = ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_SESSION_ID", "CLAUDE_PID",
         "CLAUDE_PROJECT_DIR", "CLAUDE_CODE_SSE_PORT")
#: Seconds Claude gives the turn-end command (it returns in a fraction of one).
TURN_END_TIMEOUT = 30
NOTE = ("Claude Code asks whether to trust a directory it has not run in before: answer it in "
        "the crew's window the first time (fm crew attach {crew}), or start crews in trusted "
        "directories.")


def settings(request: CrewLaunchRequest) -> dict[str, object]:
    """The crew's own settings layer."""
    handler = {"type": "command", "command": request.fm_command("crew", "turn-ended", request.crew),
               "timeout": TURN_END_TIMEOUT}
    report = request.fm_command("crew", "status", request.crew)
    return {
        "hooks": {event: [{"hooks": [dict(handler)]}] for event in ("Stop", "StopFailure")},
        "permissions": {"allow": [f"Bash({report}:*)"]},
    }


def launch(request: CrewLaunchRequest) -> CrewLaunch:
    config = CrewFile(SETTINGS, json.dumps(settings(request), indent=2) + "\n")
    argv = (PROGRAM, "--settings", str(request.file(config.path)), *request.extra_args,
            request.brief)
    return CrewLaunch(argv=argv, unset_env=UNSET, files=(config,),
                      notes=(NOTE.format(crew=request.crew),))
