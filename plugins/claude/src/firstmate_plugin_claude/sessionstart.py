"""The Claude ``SessionStart`` hook: take the session lock and tell the model how to operate.

It runs synchronously (never ``asyncRewake``: an async SessionStart hook has blocked startup in
some Claude builds) and prints Claude's JSON envelope with ``additionalContext``, which Claude
adds to the session's context. It never arms: the Stop hook owns the watcher.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from firstmate.api import OP_PREFIX as PREFIX
from firstmate.api import Home, HookOutcome, one_line

OPERATING = (
    "Firstmate supervises the crews of this home, and this Claude Code session is the primary. "
    f"A wake arrives as Stop hook feedback starting with `{PREFIX}`. For every wake: run "
    "`fm wake drain`, handle each event it shows, then run the exact acknowledgement command it "
    "printed after WAKE_ACK_REQUIRED (`fm wake drain --ack-through SEQ --recovery-generation "
    "GEN`). Until you acknowledge, the rows stay queued, so an interrupted turn simply drains "
    "again. Continuity is automatic: a Stop hook re-arms the watcher after every turn, so never "
    "run `fm arm` yourself. A notice saying `watcher: FAILED`, `auto-arm FAILED` or "
    "`INTERRUPTED` is an alarm: run `fm status` and tell the captain."
)
READ_ONLY = (
    "Another live Firstmate session (pid {pid}) holds this home's session lock, so this session "
    "is read-only for supervision: do not drain or acknowledge wakes here, and tell the captain "
    "if that is unexpected."
)


def context_text(lock_line: str) -> str:
    return f"{PREFIX} {OPERATING}\n{lock_line}"


def session_start(payload: Mapping[str, Any] | None, home: Home,
                  env: Mapping[str, str]) -> HookOutcome:
    from firstmate.api import FirstmateError, primary_scope, session_lock

    from firstmate_plugin_claude.hooks import PROJECT_ENV

    if not primary_scope(home, payload, env, project_env=PROJECT_ENV).primary:
        return HookOutcome.silent()
    try:
        acquired = session_lock.acquire(home, env)
        lock_line = (f"Session lock: held by this session (Claude pid {acquired.record.pid}).")
    except session_lock.SessionLockHeld as exc:
        lock_line = READ_ONLY.format(pid=exc.holder_pid)
    except FirstmateError as exc:
        lock_line = ("Session lock: could not be taken ("
                     f"{one_line(str(exc), 300)}); the Stop hook stays inert until "
                     "`fm lock acquire` succeeds in this session.")
    envelope = {"hookSpecificOutput": {"hookEventName": "SessionStart",
                                       "additionalContext": context_text(lock_line)}}
    return HookOutcome(0, json.dumps(envelope) + "\n", "")


__all__ = ["OPERATING", "context_text", "session_start"]
