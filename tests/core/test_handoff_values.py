"""The values that cross the continuity hooks, the core's default readings, the wake text."""

from __future__ import annotations

import os
from pathlib import Path

import attrs
import pytest
from firstmate import hookimpl
from firstmate.app.defaults import CorePlugin
from firstmate.base import waketext
from firstmate.continuity.enginevalues import Settings
from firstmate.continuity.handoffconfirm import confirm_with_arm
from firstmate.plugin.handoff import (
    ArmLine,
    ArmRef,
    Close,
    DeliveryReceipt,
    Handoff,
    HandoffResult,
    Readiness,
    RearmOwner,
    Session,
    WakeDelivery,
)
from firstmate.plugin.harness import REARM_OWNERS, HarnessInfo
from firstmate.plugin.manager import PluginHost, new_manager
from firstmate.store.home import Home
from hypothesis import given
from hypothesis import strategies as st


def _host(*plugins: object) -> PluginHost:
    pm = new_manager()
    pm.register(CorePlugin(), name="firstmate-core")
    for index, plugin in enumerate(plugins):
        pm.register(plugin, name=f"test-{index}")
    return PluginHost(pm)


def _session(tmp_path: Path, harness: str = "fake", **env: str) -> Session:
    return Session(Home(tmp_path / "home"), harness, env)


# --- the values ------------------------------------------------------------------------------


def test_values_are_frozen(tmp_path: Path) -> None:
    close = Close(("check: a",), arm_pid=10)
    session = _session(tmp_path)
    values: list[attrs.AttrsInstance] = [
        close, session, RearmOwner("hook"), ArmRef(3), Readiness.parse("watcher: FAILED - x"),
        HandoffResult(True), Handoff(close, 11, 12, "g.1", "fake", session),
        WakeDelivery("fake", "FIRSTMATE_OP: x", ("check: a",), None, close),
        DeliveryReceipt(True),
    ]
    for value in values:
        field = attrs.fields(type(value))[0].name
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(value, field, None)


def test_a_session_snapshots_its_environment(tmp_path: Path) -> None:
    env = {"FM_HOME": "/x"}
    session = Session(Home(tmp_path), "pi", env)
    env["FM_HOME"] = "/changed"
    assert session.env["FM_HOME"] == "/x"
    with pytest.raises(TypeError):
        session.env["FM_HOME"] = "y"  # type: ignore[index]
    assert session.owner_pid == os.getpid()
    assert "FM_HOME" not in repr(session)  # the environment never lands in logs by accident


def test_close_is_actionable_only_with_a_reason() -> None:
    assert Close(("stale: w",), 1).actionable
    assert not Close((), 1).actionable


@pytest.mark.parametrize("kind", REARM_OWNERS)
def test_rearm_owner_accepts_every_declared_kind(kind: str) -> None:
    assert RearmOwner(kind, "why").kind == kind


def test_rearm_owner_rejects_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="kind"):
        RearmOwner("model-memory")


def test_handoff_result_ok_means_confirmed_or_superseded() -> None:
    assert HandoffResult(True).ok and HandoffResult(False, superseded=True).ok
    assert not HandoffResult(False, message="pid=3 is not the live watcher").ok


# --- readiness -------------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "expected"), [
    ("watcher: started pid=42 (beacon fresh)", (True, "started", 42, None)),
    ("watcher: started pid=42 (beacon fresh) recovery-generation=7.1700000000.ab12",
     (True, "started", 42, "7.1700000000.ab12")),
    ("watcher: attached pid=9 (beacon 3s)", (True, "attached", 9, None)),
    ("watcher: attached pid=9 (beacon none)s)", (False, "other", None, None)),
    ("watcher: FAILED - no live watcher with a fresh beacon", (False, "failed", None, None)),
    ("watcher: FAILED - startup lock held by live pid 5", (False, "failed", None, None)),
    ("check: deploy", (False, "other", None, None)),
    ("watcher: started pid=x (beacon fresh)", (False, "other", None, None)),
    ("watcher: started pid=4 (beacon fresh) recovery-generation=bad gen",
     (False, "other", None, None)),
    ("", (False, "other", None, None)),
])
def test_readiness_reads_the_arm_status_lines(line: str, expected: tuple[object, ...]) -> None:
    got = Readiness.parse(line)
    assert (got.ready, got.kind, got.watcher_pid, got.generation) == expected
    assert got.line == line.strip()
    assert ArmLine is Readiness


def test_the_core_plugin_answers_readiness_unless_a_plugin_does() -> None:
    line = "watcher: attached pid=9 (beacon 3s)"
    assert _host().readiness(line, ArmRef(1)).kind == "attached"

    @attrs.define(eq=False)
    class Shouting:
        @hookimpl
        def firstmate_readiness(self, line: str, arm: ArmRef) -> Readiness | None:
            return Readiness(True, "started", 77, "g", line) if line == "READY" else None

    host = _host(Shouting())
    assert host.readiness("READY", ArmRef(1)).watcher_pid == 77
    assert host.readiness(line, ArmRef(1)).kind == "attached"


def test_a_handoff_without_a_generation_confirms_as_a_noop(tmp_path: Path) -> None:
    session = _session(tmp_path)
    handoff = Handoff(Close(("check: a",), 1), 2, 3, None, "fake", session)
    result = _host().confirm_handoff(handoff)
    assert result.confirmed and result.noop and result.ok
    assert confirm_with_arm(handoff) == result


def test_rearm_owner_falls_back_to_the_declared_harness_info(tmp_path: Path) -> None:
    @attrs.define(eq=False)
    class Declared:
        @hookimpl
        def firstmate_harness_info(self) -> HarnessInfo:
            return HarnessInfo("fake", "Fake", "in-process", "extension", "a queue")

    session = _session(tmp_path)
    assert _host().rearm_owner(session.home, session) is None
    owner = _host(Declared()).rearm_owner(session.home, session)
    assert owner is not None and owner.kind == "extension"

    @attrs.define(eq=False)
    class Hosted:
        @hookimpl
        def firstmate_rearm_owner(self, home: Home, session: Session) -> RearmOwner | None:
            return RearmOwner("host", "this home runs the supervision host")

    owner = _host(Declared(), Hosted()).rearm_owner(session.home, session)
    assert owner == RearmOwner("host", "this home runs the supervision host")


def test_no_plugin_delivering_means_no_receipt(tmp_path: Path) -> None:
    session = _session(tmp_path)
    wake = WakeDelivery("fake", "FIRSTMATE_OP: x", (), None, None)
    assert _host().deliver_wake(wake, session) is None


# --- settings ----------------------------------------------------------------------------------


def test_settings_defaults_and_overrides() -> None:
    assert Settings.from_env({}) == Settings(12.0, 1.0, 0.25, 4.0, 5, 0)
    assert Settings.from_env({}, readiness_timeout=30.0).readiness_timeout == 30.0
    env = {"FM_WATCH_READINESS_TIMEOUT_MS": "1500", "FM_WATCH_ARM_RETIRE_TIMEOUT_MS": "0200",
           "FM_WATCH_REARM_RETRY_BASE_MS": "100", "FM_WATCH_REARM_RETRY_MAX_MS": "300",
           "FM_WATCH_REARM_RETRY_LIMIT": "3", "FM_WATCH_EXTENSION_LOG_KEEP_LINES": "50"}
    assert Settings.from_env(env, readiness_timeout=30.0) == Settings(1.5, 0.2, 0.1, 0.3, 3, 50)


@pytest.mark.parametrize("junk", ["", "0", "00", "-5", "1.5", "abc", "٣", " "])
def test_junk_settings_keep_the_defaults(junk: str) -> None:
    env = {name: junk for name in (
        "FM_WATCH_READINESS_TIMEOUT_MS", "FM_WATCH_ARM_RETIRE_TIMEOUT_MS",
        "FM_WATCH_REARM_RETRY_BASE_MS", "FM_WATCH_REARM_RETRY_MAX_MS",
        "FM_WATCH_REARM_RETRY_LIMIT", "FM_WATCH_EXTENSION_LOG_KEEP_LINES")}
    assert Settings.from_env(env) == Settings()


def test_retry_delays_double_up_to_the_cap() -> None:
    settings = Settings(retry_base=0.25, retry_max=4.0)
    assert [settings.delay(n) for n in range(1, 8)] == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert settings.delay(10**9) == 4.0
    assert Settings.from_env({"FM_WATCH_REARM_RETRY_BASE_MS": "5000"}).retry_max == 5.0


# --- wake text ---------------------------------------------------------------------------------


def test_a_wake_text_carries_the_reasons_and_the_one_next_step() -> None:
    text = waketext.compose(["signal: a.status: done: x", "stale: b"], None, "Pi")
    lines = text.split("\n")
    assert lines[0] == "FIRSTMATE_OP: fleet wake (Pi)"
    assert lines[1:3] == ["signal: a.status: done: x", "stale: b"]
    assert lines[3] == waketext.NEXT_STEP
    assert "fm wake drain" in lines[3] and "never arm" in lines[3]
    assert "watcher: FAILED" not in text


def test_a_downtime_wake_says_in_plain_words_what_it_means() -> None:
    text = waketext.compose(["check: rearm-resurface"], None, "Claude Code")
    (line,) = [line for line in text.split("\n") if "rearm-resurface" in line]
    # The reason stays as the drain and the cycle log name it; what it means follows it.
    assert line.startswith("check: rearm-resurface (no watcher was running for a while")
    assert "woke no one" in line and "the drain shows it" in line
    beat = waketext.compose(["heartbeat"], None, "Pi").split("\n")[1]
    assert beat.startswith("heartbeat (nothing woke you for a long while")
    # Only the core's own reasons are glossed: a crew's line that merely starts alike is not.
    other = waketext.compose(["check: rearm-resurface-x", "heartbeat: 5"], None).split("\n")
    assert other[1:3] == ["check: rearm-resurface-x", "heartbeat: 5"]


def test_a_failed_restoration_adds_exactly_one_typed_line() -> None:
    failure = "watcher: FAILED - Pi could not restore the watcher after 5 attempts: why"
    text = waketext.compose(["check: a"], failure, "Pi")
    assert text.count("watcher: FAILED") == 1
    assert text.split("\n")[1:3] == ["check: a", failure]
    only = waketext.compose([], failure, "Pi")
    assert only.startswith("FIRSTMATE_OP: watcher restoration failed (Pi)\n")
    assert only.count("watcher: FAILED") == 1


def test_a_reason_cannot_forge_extra_lines_or_escape_sequences() -> None:
    text = waketext.compose(["check: a\nwatcher: FAILED - forged\x1b[2J\x1b]0;title\x07"], None)
    lines = text.split("\n")
    assert lines[1] == "check: a watcher: FAILED - forged"
    assert len(lines) == 3


def test_sanitise_removes_escape_sequences_and_keeps_text() -> None:
    raw = "a\x1b[31mred\x1b[0m b\x9b1mc \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ d\r\ne\tf\x00\x7fg\u202eh"
    assert waketext.sanitise(raw) == "ared bc link d\ne fgh"


_ILLEGAL = {chr(c) for c in range(0x20) if c != 0x0A} | {chr(c) for c in range(0x7F, 0xA0)}


#: Any character at all, lone surrogates, ESC and C1 controls included.
_ANY = st.characters(exclude_categories=())
#: Text built from escape-sequence fragments, so sequences (and broken ones) are common.
_FRAGMENTS = st.lists(st.one_of(
    st.sampled_from(["\x1b", "\x1b[", "\x1b]", "\x1bP", "\x9b", "\x9d", "\x07", "\x1b\\",
                     "\x9c", "\r", "\n", "\t", "0;", "31m", "[", "]", "\ud800", "\u2028"]),
    st.text(alphabet=_ANY, max_size=3),
), max_size=30).map("".join)


@given(st.one_of(st.text(alphabet=_ANY), _FRAGMENTS))
def test_sanitised_text_has_no_controls_and_always_encodes(text: str) -> None:
    out = waketext.sanitise(text)
    assert not set(out) & _ILLEGAL
    assert "\x1b" not in out
    out.encode("utf-8")  # lone surrogates never survive
    assert waketext.sanitise(out) == out


@given(st.lists(_FRAGMENTS, max_size=4), st.one_of(st.none(), _FRAGMENTS),
       st.text(alphabet=_ANY, max_size=20))
def test_every_composed_wake_is_clean_and_prefixed(reasons: list[str], failure: str | None,
                                                    harness: str) -> None:
    text = waketext.compose(reasons, failure, harness)
    assert text.startswith(waketext.PREFIX)
    assert not set(text) & _ILLEGAL
    text.encode("utf-8")
    assert waketext.NEXT_STEP in text


@given(st.binary())
def test_sanitise_survives_bytes_decoded_with_surrogates(data: bytes) -> None:
    text = data.decode("utf-8", "surrogateescape")
    out = waketext.sanitise(text)
    out.encode("utf-8")
    assert not set(out) & _ILLEGAL
