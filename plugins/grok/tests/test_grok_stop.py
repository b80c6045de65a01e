"""Grok's Stop hook: native blocking when the payload carries ``stopHookActive``, else one
bounded ``grok --resume`` fallback; never keyed on ``GROK_SESSION_ID``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from firstmate.api import Home
from firstmate.testing import DEADLINE, arm_env, eventually, fm_command, fm_home  # noqa: F401
from firstmate_plugin_grok.hooks import RULES, plugin

STOP = {"hookEventName": "Stop", "sessionId": "grok-s1", "cwd": "/tmp", "workspaceRoot": "/tmp"}


@pytest.fixture
def env(fm_home: Home, tmp_path: Path) -> dict[str, str]:  # noqa: F811
    run_env = arm_env(fm_home, tmp_path)
    done = subprocess.run(fm_command("crew", "add", "alpha", "--pane", "%0"), env=run_env,
                          capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0, done.stderr
    fake = tmp_path / "fake-grok"
    record = tmp_path / "grok-calls.jsonl"
    fake.write_text(f"#!{sys.executable}\n"
                    "import json, os, sys\n"
                    f"with open({str(record)!r}, 'a') as f:\n"
                    "    f.write(json.dumps([sys.argv[1:], "
                    "os.environ.get('GROK_TURNEND_GUARD_ACTIVE')]) + '\\n')\n")
    fake.chmod(0o755)
    return {**run_env, "GROK_HOOK_EVENT": "Stop", "FM_GROK_COMMAND": str(fake),
            "FM_TEST_GROK_RECORD": str(record)}


def hook(home: Home, env: dict[str, str], **payload: object) -> tuple[int, str, str]:
    body = {**STOP, **payload}
    for key in [k for k, v in body.items() if v is None]:
        del body[key]
    outcome = plugin.firstmate_hook(harness="grok", event="stop", payload=body, home=home,
                                    env=env)
    assert outcome is not None
    return outcome.exit_code, outcome.stdout, outcome.stderr


def calls(env: dict[str, str], expect: int) -> list[list[object]]:
    path = Path(env["FM_TEST_GROK_RECORD"])
    if expect:
        eventually("the fallback to resume grok",
                   lambda: path.exists() and len(path.read_text().splitlines()) >= expect, DEADLINE)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_native_blocking_when_the_payload_says_so(fm_home: Home, env: dict[str, str]) -> None:  # noqa: F811
    code, out, err = hook(fm_home, env, stopHookActive=False)
    assert code == 2 and out == "" and err.startswith("FIRSTMATE_OP:")
    assert hook(fm_home, env, stopHookActive=True)[0] == 0
    # camelCase wins over snake_case.
    assert hook(fm_home, env, stopHookActive=True, stop_hook_active=False)[0] == 0
    assert hook(fm_home, env, stop_hook_active=False)[0] == 2
    assert calls(env, 0) == []  # native mode never resumes anything


def test_fallback_resumes_the_payload_session_once(fm_home: Home, env: dict[str, str]) -> None:  # noqa: F811
    code, _, err = hook(fm_home, env)
    assert code == 0 and "resumed Grok session grok-s1 once" in err
    (argv, guard), = calls(env, 1)
    assert argv[:2] == ["--resume", "grok-s1"] and str(argv[2]).startswith("FIRSTMATE_OP:")
    assert guard == "1"
    assert hook(fm_home, env) == (0, "", "")  # bounded: no second resume
    assert len(calls(env, 1)) == 1
    # The resumed session's own Stop never chains another resume.
    assert hook(fm_home, {**env, "GROK_TURNEND_GUARD_ACTIVE": "1"}, sessionId="other") == (0, "", "")
    assert len(calls(env, 1)) == 1


def test_fallback_is_never_keyed_on_grok_session_id(fm_home: Home, env: dict[str, str]) -> None:  # noqa: F811
    leaked = {**env, "GROK_SESSION_ID": "leaked-from-a-parent"}
    code, _, err = hook(fm_home, leaked, sessionId=None)
    assert code == 0 and "no sessionId" in err
    assert calls(env, 0) == []
    hook(fm_home, leaked, sessionId="grok-s2")
    (argv, _), = calls(env, 1)
    assert argv[1] == "grok-s2"


def test_nothing_to_supervise_is_silent(tmp_path: Path) -> None:
    home = Home(tmp_path / "h").ensure()
    env = {**arm_env(home, tmp_path), "GROK_HOOK_EVENT": "Stop"}
    assert hook(home, env, stopHookActive=False) == (0, "", "")
    assert hook(home, env) == (0, "", "")


def test_rules_teach_the_tracked_background_task_protocol() -> None:
    assert "background: true" in RULES and "`fm arm`" in RULES
    assert "Trust only the one status line" in RULES
    assert "fm wake drain" in RULES and "&" in RULES


def test_a_session_id_no_command_line_can_take_is_no_session(fm_home: Home,  # noqa: F811
                                                              env: dict[str, str]) -> None:
    from firstmate_plugin_grok.stop import resume_fallback

    for bad in ("\x00", "a\nb", "\x1b[2J"):
        outcome = resume_fallback({"hookEventName": "Stop", "sessionId": bad}, fm_home, env)
        assert outcome.exit_code == 0 and "Traceback" not in outcome.stderr
