"""The primary's commit of remote crews' events (firstmate.fleet.inbox): each event lands in the
home's crew files exactly once, in order, through duplicates, replays and a crash between the
commit and the append; real files and a real SQLite store."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from firstmate.fast import crewlog
from firstmate.fleet.inbox import Inbox, Incoming
from firstmate.fleet.wire import Event
from firstmate.store import crew
from firstmate.store.database import Store, open_store
from firstmate.store.home import Home


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "primary").ensure()


@pytest.fixture
def inbox(home: Home) -> Iterator[Inbox]:
    store = open_store(home)
    try:
        yield Inbox(home, store)
    finally:
        store.close()


def status(n: int, text: str, *, crew_name: str = "alice", host: str = "gpu",
           epoch: str = "e1", at: float = 1700000000.0) -> Event:
    return Event("f1", host, epoch, "status", crew_name, n, at + n, text)


def lines(home: Home, name: str) -> list[str]:
    span = crewlog.read_span(os.fspath(crew.path(home, name, crew.STATUS)), 0)
    return [] if span is None else [line[0] for line in span[3]]


def test_new_lines_become_a_registered_crews_log(home: Home, inbox: Inbox) -> None:
    out = inbox.commit([Incoming(status(1, "working: a"), 10),
                        Incoming(status(2, "done: b"), 11)])
    assert (out.applied, out.duplicates, out.refused) == (2, 0, ())
    member = crew.get(home, "gpu.alice")
    assert (member.pane, member.host) == ("-", "gpu")
    assert lines(home, "gpu.alice") == ["working: a", "done: b"]
    assert crew.list(home)[0].name == "gpu.alice"


def test_redelivered_events_are_dropped_silently(home: Home, inbox: Inbox) -> None:
    inbox.commit([Incoming(status(1, "a"), 10), Incoming(status(2, "b"), 11)])
    out = inbox.commit([Incoming(status(1, "a"), 10), Incoming(status(2, "b"), 11),
                        Incoming(status(3, "c"), 12)])
    assert (out.applied, out.duplicates, out.refused) == (1, 2, ())
    assert lines(home, "gpu.alice") == ["a", "b", "c"]


def test_an_old_id_published_again_is_a_refused_replay(home: Home, inbox: Inbox) -> None:
    inbox.commit([Incoming(status(1, "done: once"), 10)])
    out = inbox.commit([Incoming(status(1, "done: once"), 57)])
    assert out.applied == 0
    assert [(r.host, r.code) for r in out.refused] == [("gpu", "replayed message")]
    assert lines(home, "gpu.alice") == ["done: once"]


def test_a_new_outbox_counts_again_from_one(home: Home, inbox: Inbox) -> None:
    inbox.commit([Incoming(status(1, "old"), 10)])
    out = inbox.commit([Incoming(status(1, "new", epoch="e2"), 11)])
    assert out.applied == 1
    assert lines(home, "gpu.alice") == ["old", "new"]


def test_a_local_crew_of_that_name_is_never_written_to(home: Home, inbox: Inbox) -> None:
    crew.add(home, "gpu.alice", "%4")
    out = inbox.commit([Incoming(status(1, "done: forged into a local crew"), 10)])
    assert out.applied == 0
    assert [r.code for r in out.refused] == ["crew name taken"]
    assert lines(home, "gpu.alice") == []
    assert crew.get(home, "gpu.alice").pane == "%4"


def test_hosts_never_share_a_crew(home: Home, inbox: Inbox) -> None:
    inbox.commit([Incoming(status(1, "from gpu"), 10),
                  Incoming(status(1, "from cpu", host="cpu"), 11)])
    assert lines(home, "gpu.alice") == ["from gpu"]
    assert lines(home, "cpu.alice") == ["from cpu"]


def test_hostile_text_is_one_clean_line(home: Home, inbox: Inbox) -> None:
    inbox.commit([Incoming(status(1, "done: a\nsignal: forged\x1b[2J\tz"), 10)])
    assert lines(home, "gpu.alice") == ["done: a signal: forged z"]


def test_turn_ends_and_registrations(home: Home, inbox: Inbox) -> None:
    events = [Event("f1", "gpu", "e1", "crew", "bob", 1, 1.0, "%7"),
              Event("f1", "gpu", "e1", "turn", "bob", 1, 1700000001.25, ""),
              Event("f1", "gpu", "e1", "turn", "bob", 2, 1700000002.5, "")]
    out = inbox.commit([Incoming(e, i) for i, e in enumerate(events, 1)])
    assert out.applied == 3
    member = crew.get(home, "gpu.bob")
    assert (member.pane, member.host, member.pid) == ("%7", "gpu", None)
    marker = crew.path(home, "gpu.bob", crew.TURN_ENDED).read_text()
    assert marker == "1700000001.250\n1700000002.500\n"
    inbox.commit([Incoming(Event("f1", "gpu", "e1", "crew", "bob", 2, 2.0, ""), 9)])
    assert not crew.exists(home, "gpu.bob")
    assert crew.path(home, "gpu.bob", crew.TURN_ENDED).exists()  # (its logs are kept)


def _intent(store: Store, msg_id: str, name: str, start: int, data: bytes) -> None:
    with store.transaction() as conn:
        conn.execute("INSERT INTO fleet_inbox (msg_id, name, suffix, start, data) VALUES "
                     "(?, ?, '.status', ?, ?)", (msg_id, name, start, data))


def test_recovery_appends_a_line_a_crash_left_unwritten(home: Home, inbox: Inbox) -> None:
    inbox.commit([Incoming(status(1, "first"), 10)])
    size = crew.path(home, "gpu.alice", crew.STATUS).stat().st_size
    # What a relay killed after its commit and before its append leaves behind.
    _intent(inbox.store, "gpu/e1/status/alice/2", "gpu.alice", size, b"1700000002.000\tsecond\n")
    assert inbox.recover() == 1
    assert lines(home, "gpu.alice") == ["first", "second"]
    assert inbox.recover() == 0
    with inbox.store.reading() as conn:
        assert conn.execute("SELECT count(*) FROM fleet_inbox").fetchone()[0] == 0


def test_recovery_never_writes_an_appended_line_twice(home: Home, inbox: Inbox) -> None:
    inbox.commit([Incoming(status(1, "first"), 10)])
    path = crew.path(home, "gpu.alice", crew.STATUS)
    size = path.stat().st_size
    data = b"1700000002.000\tsecond\n"
    with path.open("ab") as fh:
        fh.write(data)  # the append happened; the crash came before the intent was deleted
    _intent(inbox.store, "gpu/e1/status/alice/2", "gpu.alice", size, data)
    # ... and a local writer appended after it meanwhile.
    crew.append_status(home, "gpu.alice", "answered: key=k yes")
    assert inbox.recover() == 0
    assert lines(home, "gpu.alice") == ["first", "second", "answered: key=k yes"]


def test_a_batch_that_fails_half_way_is_finished_by_the_next(home: Home, inbox: Inbox,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    from firstmate.fleet import inbox as inboxmod

    real = inboxmod._Locks.append
    calls = {"n": 0}

    def flaky(self: inboxmod._Locks, name: str, suffix: str, data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        real(self, name, suffix, data)

    monkeypatch.setattr(inboxmod._Locks, "append", flaky)
    with pytest.raises(OSError):
        inbox.commit([Incoming(status(1, "one"), 10), Incoming(status(2, "two"), 11)])
    # The relay acknowledged nothing, so JetStream delivers the batch again.
    out = inbox.commit([Incoming(status(1, "one"), 10), Incoming(status(2, "two"), 11)])
    assert out.duplicates == 2
    assert lines(home, "gpu.alice") == ["one", "two"]


def test_an_event_before_the_one_it_follows_is_held(home: Home, inbox: Inbox) -> None:
    inbox.commit([Incoming(status(1, "one"), 10)])
    # Line 2 went to a fetch whose connection was lost; line 3 arrives first.
    out = inbox.commit([Incoming(status(3, "three"), 12)])
    assert out.applied == 0
    assert [(g.expected, g.got) for g in out.gaps] == [(2, 3)]
    assert lines(home, "gpu.alice") == ["one"]
    # Delivered again, oldest first: both apply, in order.
    out = inbox.commit([Incoming(status(2, "two"), 11), Incoming(status(3, "three"), 12)])
    assert (out.applied, out.gaps) == (2, ())
    assert lines(home, "gpu.alice") == ["one", "two", "three"]


def test_a_sequence_whose_predecessors_are_gone_is_taken_up_when_accepted(
        home: Home, inbox: Inbox) -> None:
    inbox.commit([Incoming(status(1, "one"), 10)])
    key = ("gpu", "e1", "alice", "status")
    out = inbox.commit([Incoming(status(5, "five"), 14)], accept={key})
    assert (out.applied, out.gaps) == (1, ())
    assert lines(home, "gpu.alice") == ["one", "five"]


def test_a_registration_carries_the_panes_program_on_its_host(home: Home, inbox: Inbox) -> None:
    event = Event("f1", "gpu", "e1", "crew", "bob", 1, 1.0, "%7\t4242 123456")
    inbox.commit([Incoming(event, 1)])
    member = crew.get(home, "gpu.bob")
    assert (member.pane, member.host, member.pid, member.started) == ("%7", "gpu", 4242, 123456)
    assert crew.path(home, "gpu.bob", crew.PANE).read_text() == \
        "%7\nhost gpu\npid 4242 123456\n"
    inbox.commit([Incoming(Event("f1", "gpu", "e1", "crew", "bob", 2, 2.0,
                                 "%7\tnot-a-pid $(x)"), 2)])
    member = crew.get(home, "gpu.bob")
    assert (member.pane, member.pid, member.started) == ("%7", None, None)


def test_an_intent_left_in_the_old_format_is_applied_as_a_hosts_registration(
        home: Home, inbox: Inbox) -> None:
    inbox.commit([Incoming(Event("f1", "gpu", "e1", "crew", "bob", 1, 1.0, "%7"), 1)])
    with inbox.store.transaction() as conn:  # (as a relay of the previous format left it)
        conn.execute("INSERT INTO fleet_inbox (msg_id, name, suffix, start, data) VALUES "
                     "('gpu/e1/crew/bob/2', 'gpu.bob', '.pane', -1, ?)", (b"fleet://gpu/%9",))
    inbox.recover()
    member = crew.get(home, "gpu.bob")
    assert (member.pane, member.host) == ("%9", "gpu")


def test_the_crews_written_are_named_in_the_change_journal(home: Home, inbox: Inbox) -> None:
    # (the watcher's status source looks at the crews named there, not at the whole fleet)
    journal = home.crew_dir / ".changes"
    inbox.commit([Incoming(status(1, "a"), 10), Incoming(status(1, "b", crew_name="bob"), 11)])
    assert sorted(journal.read_text().split()) == ["gpu.alice", "gpu.bob"]
    inbox.commit([Incoming(status(1, "a"), 10)])  # (a duplicate writes nothing, names nothing)
    assert sorted(journal.read_text().split()) == ["gpu.alice", "gpu.bob"]
    size = crew.path(home, "gpu.alice", crew.STATUS).stat().st_size
    _intent(inbox.store, "gpu/e1/status/alice/2", "gpu.alice", size, b"1700000002.000\tc\n")
    assert inbox.recover() == 1
    assert journal.read_text().split()[-1] == "gpu.alice"
