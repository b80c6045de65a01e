"""A joined home's outbox (firstmate.fleet.outbox): the crews' own logs, read from cursors into
events whose numbers the files alone fix, so an event sent again carries the same id."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from firstmate.fast import crewreport
from firstmate.fleet.outbox import Outbox, out_dir
from firstmate.store import crew
from firstmate.store.home import Home


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "remote").ensure()


def ids(box: Outbox, name: str) -> list[tuple[str, int, str]]:
    return [(e.kind, e.n, e.text) for e, _ in box.take(name)]


def send_all(box: Outbox, name: str) -> None:
    for _event, cursor in box.take(name):
        box.advance(name, cursor)
    box.save(name)


def test_a_fresh_outbox_starts_at_the_end_of_every_log(home: Home) -> None:
    crew.add(home, "alice", "%1")
    crew.append_status(home, "alice", "working: before the join")
    box = Outbox.open(home, "f1", "gpu")
    # Only the registration goes out: what was reported before the join stays here.
    assert ids(box, "alice") == [("crew", 1, "%1")]
    crewreport.status(str(home.root), "alice", "done: after")
    assert ids(box, "alice") == [("crew", 1, "%1"), ("status", 1, "done: after")]


def test_numbers_are_fixed_by_the_files_so_a_resend_has_the_same_ids(home: Home) -> None:
    box = Outbox.open(home, "f1", "gpu")
    crew.add(home, "alice", "%1")
    for text in ("a", "b", "c"):
        crewreport.status(str(home.root), "alice", f"working: {text}")
    first = [e.msg_id for e, _ in box.take("alice")]
    # A forwarder that died before saving its cursor: a new one reads the same ids.
    again = [e.msg_id for e, _ in Outbox.open(home, "f1", "gpu").take("alice")]
    assert first == again
    assert first[1:] == [f"gpu/{box.epoch}/status/alice/{n}" for n in (1, 2, 3)]
    send_all(box, "alice")
    assert Outbox.open(home, "f1", "gpu").take("alice") == []
    crewreport.status(str(home.root), "alice", "done: d")
    assert ids(Outbox.open(home, "f1", "gpu"), "alice") == [("status", 4, "done: d")]


def test_turn_ends_and_leaving_are_events(home: Home) -> None:
    box = Outbox.open(home, "f1", "gpu")
    crew.add(home, "bob", "%2")
    send_all(box, "bob")
    assert box.pending() == []
    crew.mark_turn_ended(home, "bob")
    assert box.pending() == ["bob"]
    [(event, _)] = box.take("bob")
    assert (event.kind, event.n) == ("turn", 1)
    send_all(box, "bob")
    crew.path(home, "bob", crew.TURN_ENDED).touch()  # a bare touch is a turn end too
    os.utime(crew.path(home, "bob", crew.TURN_ENDED), ns=(1, 2))
    assert [(e.kind, e.n) for e, _ in box.take("bob")] == [("turn", 2)]
    send_all(box, "bob")
    crew.unregister(home, "bob")
    assert box.pending() == ["bob"]
    assert ids(box, "bob") == [("crew", 2, "")]


def test_a_crew_added_again_keeps_counting(home: Home) -> None:
    box = Outbox.open(home, "f1", "gpu")
    crew.add(home, "cat", "%3")
    crewreport.status(str(home.root), "cat", "one")
    send_all(box, "cat")
    crew.remove(home, "cat")
    crew.add(home, "cat", "%4")  # a fresh log (the filesystem may give it the same inode)
    crewreport.status(str(home.root), "cat", "two")
    assert [(e.kind, e.n, e.text) for e, _ in box.take("cat")] == [
        ("crew", 2, "%4"), ("status", 2, "two")]


def test_a_log_made_again_on_its_old_inode_is_read_from_its_start(home: Home) -> None:
    box = Outbox.open(home, "f1", "gpu")
    crew.add(home, "cat", "%3")
    path = crew.path(home, "cat", crew.STATUS)
    crewreport.status(str(home.root), "cat", "working: a long first line of the old log")
    send_all(box, "cat")
    # The same file, emptied and written again: its inode stays, its first line does not.
    with path.open("r+b") as fh:
        fh.truncate(0)
    crewreport.status(str(home.root), "cat", "done: new", now=1700000009.0)
    crewreport.status(str(home.root), "cat", "done: and more, past the old offset")
    assert [e.text for e, _ in box.take("cat")] == ["done: new",
                                                    "done: and more, past the old offset"]


def test_the_epoch_survives_and_a_lost_outbox_gets_a_new_one(home: Home) -> None:
    first = Outbox.open(home, "f1", "gpu").epoch
    assert Outbox.open(home, "f1", "gpu").epoch == first
    for entry in os.listdir(out_dir(home)):
        os.unlink(os.path.join(out_dir(home), entry))
    assert Outbox.open(home, "f1", "gpu").epoch != first
