"""A stand-in harness plugin for the ``fm crew spawn`` tests: its crew launch runs
``agent.py`` (beside this package) and writes a crew-mode config naming the turn-end command.

``FAKECREW_MODE`` in the spawner's environment picks the answer: ``argv`` (default), ``type``
(the brief is typed into the pane once it shows the prompt), ``refuse`` (the plugin's default
refusal) or ``missing`` (a program that is not on PATH).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import attrs
from firstmate.plugin.crewlaunch import CrewFile, CrewLaunch, CrewLaunchRequest
from firstmate.plugin.harness import HarnessInfo
from firstmate.plugin.pluginbase import HarnessPlugin

AGENT = Path(__file__).resolve().parent.parent / "agent.py"
INFO = HarnessInfo(name="fakecrew", display_name="Fake Crew", family="hook", rearm_owner="hook",
                   wake_channel="none: a test stand-in")


@attrs.define(eq=False)
class FakeCrewPlugin(HarnessPlugin):
    INFO = INFO

    def crew_launch(self, request: CrewLaunchRequest) -> CrewLaunch:
        mode = os.environ.get("FAKECREW_MODE", "argv")
        if mode == "refuse":
            return super().crew_launch(request)
        config = CrewFile("crew/fakecrew.json",
                          json.dumps({"turn_ended": request.turn_ended_argv()}))
        program = "no-such-fakecrew-binary" if mode == "missing" else sys.executable
        argv = [program, str(AGENT), "--crew-config", str(request.file(config.path)),
                *request.extra_args]
        if mode == "type":
            return CrewLaunch(argv=argv, prompt="type", ready=r"fakecrew>", files=(config,),
                              env={"FAKECREW_ADDED": "yes"}, unset_env=("FAKECREW_SECRET",))
        return CrewLaunch(argv=[*argv, "--", request.brief], files=(config,),
                          env={"FAKECREW_ADDED": "yes"}, unset_env=("FAKECREW_SECRET",),
                          notes=("a fake crew asks nothing",))


plugin = FakeCrewPlugin()
