"""A fleet message's checks: only the host a subject names, signing with its own key, gets an
event through; anything else is refused with a reason (the relay reports it)."""

from __future__ import annotations

import json

import pytest
from firstmate.fleet import names, wire
from firstmate.fleet.wire import Event, Refused

KEYS = {"gpu": bytes(range(32)), "cpu": bytes(range(1, 33))}


def event(**changes: object) -> Event:
    base = {"fleet": "f1", "host": "gpu", "epoch": "e1", "kind": "status", "crew": "alice",
            "n": 3, "at": 1700000000.5, "text": "done: x"}
    base.update(changes)
    return Event(**base)  # type: ignore[arg-type]


def decode(subject: str, headers: dict[str, str], body: bytes) -> Event:
    return wire.decode("f1", subject, headers, body, KEYS.get)


def test_an_event_survives_its_round_trip() -> None:
    sent = event()
    subject, body, headers = wire.encode(sent, KEYS["gpu"])
    assert subject == "fm.f1.gpu.status"
    assert headers[wire.ID_HEADER] == "gpu/e1/status/alice/3"
    assert decode(subject, headers, body) == sent


def test_a_signature_under_another_hosts_key_is_refused() -> None:
    subject, body, headers = wire.encode(event(), KEYS["cpu"])
    with pytest.raises(Refused) as caught:
        decode(subject, headers, body)
    assert (caught.value.code, caught.value.host) == ("bad signature", "gpu")


def test_a_body_naming_another_host_than_its_subject_is_forged() -> None:
    # cpu signs, under its own key, a message on its own subject that claims to be gpu's.
    claimed = event(host="gpu")
    body = claimed.body()
    subject = names.subject("f1", "cpu", "status")
    headers = {wire.ID_HEADER: claimed.msg_id,
               wire.SIG_HEADER: wire.signature(KEYS["cpu"], subject, claimed.msg_id, body)}
    with pytest.raises(Refused) as caught:
        decode(subject, headers, body)
    assert (caught.value.code, caught.value.host) == ("forged message", "cpu")


def test_an_id_that_is_not_the_events_own_is_forged() -> None:
    sent = event()
    body = sent.body()
    other = "gpu/e1/status/alice/99"
    headers = {wire.ID_HEADER: other,
               wire.SIG_HEADER: wire.signature(KEYS["gpu"], sent.subject, other, body)}
    with pytest.raises(Refused, match="forged message"):
        decode(sent.subject, headers, body)


@pytest.mark.parametrize("subject", ["fm.f2.gpu.status", "fm.f1.gpu.secrets", "x.f1.gpu.status",
                                     "fm.f1.gpu"])
def test_subjects_outside_the_fleet_are_refused(subject: str) -> None:
    _, body, headers = wire.encode(event(), KEYS["gpu"])
    with pytest.raises(Refused, match="bad subject"):
        decode(subject, headers, body)


def test_a_host_the_primary_never_added_is_unknown() -> None:
    subject, body, headers = wire.encode(event(host="ghost"), bytes(32))
    with pytest.raises(Refused) as caught:
        decode(subject.replace("gpu", "ghost"), headers, body)
    assert (caught.value.code, caught.value.host) == ("unknown host", "ghost")


@pytest.mark.parametrize("change", [{"n": -1}, {"n": True}, {"at": float("nan")}, {"at": "1"},
                                    {"crew": "../x"}, {"crew": ""}, {"epoch": "a.b"},
                                    {"v": 2}, {"text": 5}])
def test_malformed_bodies_are_refused_even_when_signed(change: dict[str, object]) -> None:
    data = json.loads(event().body())
    data.update(change)
    body = json.dumps(data).encode()
    subject = "fm.f1.gpu.status"
    msg_id = "gpu/e1/status/alice/3"
    headers = {wire.ID_HEADER: msg_id,
               wire.SIG_HEADER: wire.signature(KEYS["gpu"], subject, msg_id, body)}
    with pytest.raises(Refused, match=r"malformed message|forged message"):
        decode(subject, headers, body)


def test_names_map_remote_crews_into_the_primary() -> None:
    assert names.primary_name("gpu", "alice") == "gpu.alice"
    assert names.primary_name("gpu", "a" * 64) is None
