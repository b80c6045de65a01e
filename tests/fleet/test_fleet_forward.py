"""A joined home's forwarder looks, on a ring, only at the crews the change journal names
(firstmate.fleet.changed): a line written by hand (no journal entry, no ring) is not sent with
another crew's report, and is sent by the next full pass, every FM_FLEET_RESCAN seconds. Real
nats-server, relay, forwarder and homes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.store import crew
from firstmate.testing.procs import eventually
from remote_support import LocalFleet, reporter


@pytest.fixture
def fleet(request: pytest.FixtureRequest, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalFleet]:
    monkeypatch.setenv("FIRSTMATE_KEYS_DIR", str(tmp_path / "keys"))
    made = LocalFleet(tmp_path, ("h1",), env={"FM_FLEET_RESCAN": str(request.param)})
    try:
        made.setup()
        yield made
    finally:
        made.close()


def by_hand(fleet: LocalFleet, name: str, text: str) -> None:
    with open(crew.path(fleet.homes["h1"], name, crew.STATUS), "a") as fh:
        fh.write(f"1700000000.000\t{text}\n")


def report(fleet: LocalFleet, plan: list[tuple[str, str]]) -> None:
    assert reporter(fleet, "h1", plan).wait(60) == 0


@pytest.mark.parametrize("fleet", [600], indirect=True)
def test_a_ring_sends_the_crew_that_reported_and_looks_at_no_other(fleet: LocalFleet) -> None:
    fleet.add_crews("h1", ["c0", "c1"])
    report(fleet, [("c0", "working: a"), ("c1", "working: b")])
    fleet.wait_lines({("h1", "c0"): ["working: a"], ("h1", "c1"): ["working: b"]})
    # (every cursor saved: c1's pump has finished, so only a look can find what follows)
    eventually("the host to send everything", lambda: json.loads(fleet.fm(
        fleet.homes["h1"], "fleet", "status", "--json").stdout)["backlog_bytes"] == 0)
    by_hand(fleet, "c1", "working: by hand")
    for text in ("done: c", "done: d"):  # (two rings, each answered before the next)
        report(fleet, [("c0", text)])
    fleet.wait_lines({("h1", "c0"): ["working: a", "done: c", "done: d"]})
    # c1 changed too, but nothing named it: no ring looked at it (the full pass would).
    assert fleet.lines("h1", "c1") == ["working: b"]


@pytest.mark.parametrize("fleet", [1], indirect=True)
def test_a_line_written_by_hand_is_sent_by_the_periodic_full_pass(fleet: LocalFleet) -> None:
    fleet.add_crews("h1", ["c0", "c1"])
    report(fleet, [("c0", "working: a")])
    fleet.wait_lines({("h1", "c0"): ["working: a"]})
    by_hand(fleet, "c1", "working: by hand, no ring")
    fleet.wait_lines({("h1", "c1"): ["working: by hand, no ring"]})
