"""The Claude auto-arm hook (``fm hook claude stop|stop-failure``) and its SessionStart hook, run as
real processes against a real home, watcher and store."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from claude_support import Rig, rig_fixture  # noqa: F401  (the rig fixture)
from firstmate.testing.plant import (
    commit_claim,
    plant_claim,
    set_last_paced_claim,
    watcher_lock_held,
)
from firstmate.testing.procs import eventually
from firstmate.testing.state import pacing_left

# --- session start -----------------------------------------------------------------------------


def test_session_start_takes_the_lock_and_injects_the_operating_context(rig: Rig) -> None:
    out = json.loads(rig.session_start())
    context = out["hookSpecificOutput"]["additionalContext"]
    assert out["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert context.startswith("FIRSTMATE_OP:")
    assert "fm wake drain" in context and "never run `fm arm`" in context
    assert "held by live harness" in rig.fm("lock", "status").stdout


# --- the turn-end hook, for real ---------------------------------------------------------------


def test_stands_down_silently_without_need_or_in_away_mode(rig: Rig) -> None:
    rig.session_start()
    assert rig.run_hook("stop") == (0, "", "")  # no crew: nothing to supervise
    rig.add_crew()
    assert rig.fm("away", "on").returncode == 0
    assert rig.run_hook("stop") == (0, "", "")
    assert rig.run_hook("stop-failure", rig.payload("StopFailure", error="rate_limit")) == \
        (0, "", "")
    assert rig.run_hook("stop", FM_CREW="c") == (0, "", "")
    assert rig.ledger() == {} and rig.healthy_watcher() is None


def test_wake_exit_2_successor_holds_the_lock_and_rearm_follows(rig: Rig) -> None:
    rig.session_start()
    rig.add_crew()
    first = rig.start_hook("stop")  # stop_hook_active is true in the payload: never a skip
    epoch = eventually("the hook parked on a watcher", rig.parked)
    watcher = rig.healthy_watcher()
    rig.append("signal: builder done: WAKE-ONE")
    out, err = first.communicate(timeout=60)
    assert first.returncode == 2 and out == ""
    lines = err.splitlines()
    assert lines[0].startswith("FIRSTMATE_OP:") and "WAKE-ONE" in err
    assert "fm wake drain" in err and "never arm" in err and "FAILED" not in err
    assert rig.ledger()["outcome"] == "wake"
    # The detached handling successor outlived the hook and holds the watcher lock.
    successor = eventually("a successor watcher", rig.healthy_watcher)
    assert successor != watcher
    # The next turn end attaches to it, and the next wake arrives.
    second = rig.start_hook("stop")
    eventually("the second hook parked", lambda: rig.parked(epoch))
    rig.append("signal: builder done: WAKE-TWO")
    out, err = second.communicate(timeout=60)
    assert second.returncode == 2 and "WAKE-TWO" in err


def test_unconfirmed_successor_adds_one_line_and_never_withholds_the_wake(rig: Rig) -> None:
    rig.session_start()
    rig.add_crew()
    # A 1 ms readiness bound: the successor cannot report in time, and there is no retry.
    hook = rig.start_hook("stop", FM_WATCH_READINESS_TIMEOUT_MS="1",
                          FM_WATCH_REARM_RETRY_LIMIT="1")
    eventually("the hook parked", rig.parked)
    rig.append("signal: builder done: STILL-DELIVERED")
    _, err = hook.communicate(timeout=60)
    assert hook.returncode == 2 and "STILL-DELIVERED" in err
    failed = [line for line in err.splitlines() if line.startswith("watcher: FAILED - ")]
    assert len(failed) == 1 and "Claude Code could not restore the watcher" in failed[0]
    assert rig.ledger()["outcome"] == "wake"


def test_single_flight_two_concurrent_hooks(rig: Rig) -> None:
    rig.session_start()
    rig.add_crew()
    hooks = [rig.start_hook("stop"), rig.start_hook("stop")]
    quiet = eventually("one hook to stand down", lambda: [h for h in hooks if h.poll() is not None])
    assert len(quiet) == 1
    assert quiet[0].returncode == 0 and quiet[0].communicate() == ("", "")
    owner = next(h for h in hooks if h is not quiet[0])
    eventually("the owner parked", rig.parked)
    assert owner.poll() is None
    rig.append("signal: builder done: ONE-WAKE")
    _, err = owner.communicate(timeout=60)
    assert owner.returncode == 2 and "ONE-WAKE" in err
    assert rig.ledger()["epoch"] == 1  # one claim was ever taken


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def test_orphaned_claim_of_a_dead_session_is_superseded(rig: Rig) -> None:
    rig.session_start()
    rig.add_crew()
    orphan = _sleeper()  # a live hook process left behind by a session that is gone
    try:
        old = plant_claim(rig.home, "claude", orphan, session_pid=4_000_000)
        hook = rig.start_hook("stop")
        eventually("the new session's hook parked", lambda: rig.parked(old["epoch"]))
        rig.append("signal: builder done: AFTER-ORPHAN")
        _, err = hook.communicate(timeout=60)
        assert hook.returncode == 2 and "AFTER-ORPHAN" in err
        # The superseded owner can no longer commit.
        assert commit_claim(rig.home, "claude", old["epoch"], old["owner_pid"], "wake") is False
    finally:
        orphan.kill()
        orphan.wait()


def test_dead_owners_lock_is_reclaimed_after_the_gates(rig: Rig) -> None:
    # A session that is gone: its lock record names a shell that has exited.
    code = subprocess.run(
        ["sh", "-c", f'FM_SESSION_HOLDER_PID=$$ "{sys.executable}" -m firstmate hook claude '
                     f'session-start --home "{rig.home.root}" >/dev/null; true'],
        input=rig.payload("SessionStart"), env={**rig.env, "FM_SESSION_HOLDER_PID": ""},
        text=True, timeout=60, check=False).returncode
    assert code == 0
    assert "stale" in rig.fm("lock", "status").stdout
    assert rig.run_hook("stop") == (0, "", "")  # no need yet: the dead lock is left alone
    assert "stale" in rig.fm("lock", "status").stdout
    rig.add_crew()
    hook = rig.start_hook("stop")
    eventually("the reclaiming hook parked", rig.parked)
    assert f"pid {rig.env['FM_SESSION_HOLDER_PID']}" in rig.fm("lock", "status").stdout
    rig.append("signal: builder done: RECLAIMED")
    _, err = hook.communicate(timeout=60)
    assert hook.returncode == 2 and "RECLAIMED" in err


def test_a_missing_session_lock_keeps_the_turn_end_inert(rig: Rig) -> None:
    # No SessionStart ever took the lock: with no recorded owner there is nothing stale to
    # recover, so the turn end neither takes the lock nor arms, though there is a crew to watch.
    rig.add_crew()
    lock = rig.home.lock_path("session")
    assert not lock.exists() and "free" in rig.fm("lock", "status").stdout
    assert rig.run_hook("stop") == (0, "", "")
    assert rig.run_hook("stop-failure", rig.payload("StopFailure", error="rate_limit")) == \
        (0, "", "")
    assert not lock.exists() and "free" in rig.fm("lock", "status").stdout
    assert rig.ledger() == {} and rig.healthy_watcher() is None
    # The SessionStart hook is what takes it; the next turn end then arms.
    rig.session_start()
    hook = rig.start_hook("stop")
    eventually("the hook parked once the session took its lock", rig.parked)
    rig.append("signal: builder done: AFTER-SESSION-START")
    _, err = hook.communicate(timeout=60)
    assert hook.returncode == 2 and "AFTER-SESSION-START" in err


def test_open_claim_of_this_session_admits_no_second_hook(rig: Rig) -> None:
    rig.session_start()
    rig.add_crew()
    owner = _sleeper()
    try:
        plant_claim(rig.home, "claude", owner,
                    session_pid=int(rig.env["FM_SESSION_HOLDER_PID"]))
        assert rig.run_hook("stop") == (0, "", "")
        assert rig.ledger()["epoch"] == 1
    finally:
        owner.kill()
        owner.wait()


def test_failure_episode_failed_still_failing_alarm_then_recovery(rig: Rig) -> None:
    rig.session_start()
    rig.add_crew()
    # The blocked watcher ends its own start after 2 s (an arm never stops a watcher before
    # its claim, so the confirmation timeout alone would not end it sooner).
    env = {"FM_CLAUDE_AUTOARM_ATTEMPTS": "1", "FM_CLAUDE_AUTOARM_NOTICE_BUDGET": "2",
           "FM_ARM_CONFIRM_TIMEOUT": "3", "FM_WATCHER_STARTUP_LOCK_BOUND": "2"}
    # A live non-watcher holds the watcher singleton: every arm fails.
    with watcher_lock_held(rig.home):
        code, out, err = rig.run_hook("stop", **env)
        assert (code, out) == (2, "") and "auto-arm FAILED" in err and "evidence:" in err
        code, _, err = rig.run_hook("stop", **env)
        assert code == 2 and "STILL FAILING" in err and "last notice" in err
        assert rig.run_hook("stop", **env) == (0, "", "")  # after the alarm: suppressed
        assert rig.ledger()["outcome"] == "failed-suppressed"
    # The recovery starts a real watcher: it gets the default start budget (a loaded machine
    # may need it); the short one above only made the blocked arms fail quickly.
    hook = rig.start_hook("stop", **{k: v for k, v in env.items() if k not in (
        "FM_ARM_CONFIRM_TIMEOUT", "FM_WATCHER_STARTUP_LOCK_BOUND")})
    eventually("the recovered hook parked", rig.parked)
    rig.append("signal: builder done: RECOVERED")
    _, err = hook.communicate(timeout=60)
    assert hook.returncode == 2 and "RECOVERED" in err
    rig.fm("arm", "--stop")
    with watcher_lock_held(rig.home):
        code, _, err = rig.run_hook("stop", **env)
        assert code == 2 and "auto-arm FAILED" in err  # a new episode starts over


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_stop_signal_from_the_hook_timeout_is_exit_2_interrupted(rig: Rig, sig: int) -> None:
    rig.session_start()
    rig.add_crew()
    hook = rig.start_hook("stop")
    eventually("the hook parked", rig.parked)
    hook.send_signal(sig)
    out, err = hook.communicate(timeout=60)
    assert hook.returncode == 2 and out == ""
    assert f"INTERRUPTED by {signal.Signals(sig).name}" in err and "fm wake drain" in err
    assert rig.ledger()["outcome"] == "failed"


def test_stop_failure_is_paced_not_dropped(rig: Rig) -> None:
    rig.session_start()
    rig.add_crew()
    set_last_paced_claim(rig.home, "claude", time.time())
    started = time.monotonic()
    hook = rig.start_hook("stop-failure", rig.payload("StopFailure", error="overloaded"),
                          FM_CLAUDE_STOPFAILURE_COOLDOWN_MS="1500")
    eventually("the paced hook parked", rig.parked)
    assert time.monotonic() - started >= 1.4  # it waited out the cooldown first
    rig.append("signal: builder failed: AFTER-API-ERROR")
    _, err = hook.communicate(timeout=60)
    assert hook.returncode == 2 and "AFTER-API-ERROR" in err


def test_stop_failure_stands_down_if_away_appears_while_paced(rig: Rig) -> None:
    rig.session_start()
    rig.add_crew()
    set_last_paced_claim(rig.home, "claude", time.time() + 5)
    hook = rig.start_hook("stop-failure", rig.payload("StopFailure", error="overloaded"),
                          FM_CLAUDE_STOPFAILURE_COOLDOWN_MS="4000")
    eventually("the paced hook to start waiting",
               lambda: pacing_left(rig.home, "claude", 4.0) > 0)
    assert rig.fm("away", "on").returncode == 0
    assert hook.communicate(timeout=60) == ("", "") and hook.returncode == 0
    assert rig.ledger() == {}


def test_cross_loaded_under_grok_or_cursor_is_inert(rig: Rig) -> None:
    rig.session_start()
    rig.add_crew()
    cursor = json.dumps({"conversation_id": "c", "hook_event_name": "stop",
                         "cursor_version": "2.0", "cwd": str(rig.project)})
    assert rig.run_hook("stop", cursor) == (0, "", "")
    assert rig.run_hook("stop", GROK_AGENT="1") == (0, "", "")
    assert rig.run_hook("stop-failure", GROK_HOOK_EVENT="Stop") == (0, "", "")
    assert rig.run_hook("session-start", GROK_AGENT="1") == (0, "", "")
    assert rig.ledger() == {} and rig.healthy_watcher() is None


def test_the_plugin_directory_ships_the_same_hooks(tmp_path: Path) -> None:
    """The same events and options as ``fm install claude`` writes; only the command differs:
    the plugin's launcher finds ``fm`` itself (a static file cannot know where it is)."""
    from firstmate.api import InstallOptions
    from firstmate_plugin_claude.hooks import HOOKS, plugin_dir

    root = plugin_dir()
    manifest = json.loads((root / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "firstmate" and manifest["version"]
    hooks = json.loads((root / "hooks" / "hooks.json").read_text())["hooks"]
    wanted = HOOKS.handlers(InstallOptions("claude", tmp_path))
    launcher = '"${CLAUDE_PLUGIN_ROOT}/bin/firstmate-hook"'
    assert {event: {**wanted[event], "command": f"{launcher} claude {ours.event}"}
            for event, ours in ((e.harness_event, e) for e in HOOKS.events)} == {
        event: group[0]["hooks"][0] for event, group in hooks.items()}
