"""Grok is not launched as a crew: it says why, in one line, with what to do instead."""

from __future__ import annotations

from pathlib import Path

import pytest
from firstmate.api import CrewLaunchRequest, UsageError
from firstmate_plugin_grok.hooks import plugin


def test_a_grok_crew_is_refused_with_the_reason(tmp_path: Path) -> None:
    request = CrewLaunchRequest(crew="w1", cwd=tmp_path, home=tmp_path, brief="B",
                                fm_argv=("fm",), launch_dir=tmp_path)
    assert plugin.firstmate_crew_launch(harness="cursor", request=request) is None
    with pytest.raises(UsageError, match=r"\.grok/hooks.*fm crew add w1 --pane TARGET"):
        plugin.firstmate_crew_launch(harness="grok", request=request)
