"""``fm doctor`` on a served fleet's homes: a host whose forwarder stopped and a primary whose
supervisor stopped are named with the fix, the fix is followed as printed (``fm doctor --fix``
applies both), the doctor finds them running again, and a host's report reaches the primary."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from firstmate.fleet import paths, procs
from firstmate.store.home import Home
from firstmate.testing.procs import eventually
from test_fleet_serve import Served


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setenv("FIRSTMATE_KEYS_DIR", str(tmp_path / "keys"))
    fleet = Served(tmp_path, ("gpu",))
    try:
        yield fleet
    finally:
        fleet.close()


def fleet_line(served: Served, home: Home) -> dict[str, Any]:
    done = served.fm(home, "doctor", "--json", check=False)
    assert done.returncode in (0, 1), done.stderr
    (line,) = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "fleet"]
    return dict(line)


def follow(served: Served, home: Home, fix: str) -> None:
    """The fix as printed: an fm command line, run as this fm."""
    words = fix.split()
    assert words[0] == "fm", fix
    served.fm(home, *words[1:])


def test_a_stopped_forwarder_and_supervisor_are_started_by_the_printed_fix(
        served: Served) -> None:
    gpu = served.homes["gpu"]
    served.add_crews("gpu", ["c0"])
    assert fleet_line(served, gpu)["status"] == "ok"
    # A report starts a forwarder that is not running (at most one start per few seconds);
    # the one it started stops again at once: the fix starts it now all the same.
    assert procs.stop(gpu, paths.FORWARD_LOCK) is not None
    served.fm(gpu, "crew", "status", "c0", "working: before")
    eventually("the report to start a forwarder",
               lambda: procs.holder(gpu, paths.FORWARD_LOCK) is not None, 30.0)
    assert procs.stop(gpu, paths.FORWARD_LOCK) is not None
    line = fleet_line(served, gpu)
    assert line["status"] == "warn" and "the forwarder is not running" in line["detail"]
    assert line["fix"] == "fm doctor --fix" and line["safe"]
    follow(served, gpu, line["fix"])
    line = fleet_line(served, gpu)
    assert line["status"] == "ok" and "forwarder pid" in line["detail"]

    assert "supervisor" in served.fm(served.primary, "fleet", "stop").stdout
    line = fleet_line(served, served.primary)
    assert line["status"] == "fail" and "supervisor is not running" in line["detail"]
    assert line["fix"] == "fm fleet serve" and line["safe"]
    follow(served, served.primary, line["fix"])
    eventually("the relay to run again", lambda: fleet_line(served, served.primary)["status"]
               == "ok", 60.0)
    # The fleet the fix started again is the one the host joined: its report arrives.
    served.fm(gpu, "crew", "status", "c0", "working: after the doctor")
    served.wait_lines({("gpu", "c0"): ["working: before", "working: after the doctor"]})
