"""The core's default handoff confirmation: the verdict of ``fm arm --handling-delivered``,
reached in this process."""

from __future__ import annotations

import sqlite3

from firstmate.base.exitcodes import ExitCode
from firstmate.base.waketext import one_line
from firstmate.continuity.enginevalues import CONFIRM_TIMEOUT, PREDECESSOR_ENV
from firstmate.plugin.handoff import Handoff, HandoffResult


def confirm_with_arm(handoff: Handoff, timeout: float = CONFIRM_TIMEOUT) -> HandoffResult:
    """The verdict of ``fm arm --handling-delivered GEN --watcher-pid PID``, reached in this
    process (the same :meth:`firstmate.continuity.arm.Arm.handling_delivered`; no interpreter is started).

    Exit 0 confirms (a no-op when it says ``already acknowledged``); exit 3 (the generation
    moved on) means a newer pipeline superseded this one; anything else is a failure.
    *timeout* bounds the wait for the store's write lock.
    """
    if handoff.generation is None or handoff.watcher_pid is None:
        return HandoffResult(True, noop=True,
                             message="successor attached to a live watcher; nothing to confirm")
    import io

    from firstmate.base.errors import FirstmateError
    from firstmate.continuity.arm import Arm
    from firstmate.continuity.armcontrol import handling_delivered
    from firstmate.continuity.watchchild import child_env
    from firstmate.store.database import Store
    from firstmate.store.identity import current

    env = child_env(handoff.session.env)
    env.pop(PREDECESSOR_ENV, None)
    out = io.StringIO()
    db = Store(handoff.session.home)
    try:
        arm = Arm(handoff.session.home, env, out, current(), db)
        code = handling_delivered(arm, handoff.generation, handoff.watcher_pid,
                                      timeout=min(timeout, 10.0))
    except (FirstmateError, OSError, sqlite3.Error) as exc:
        text = exc.message if isinstance(exc, FirstmateError) else str(exc)
        return HandoffResult(False, message=f"the handoff could not be confirmed: {one_line(text)}")
    finally:
        db.close()
    said = [line for line in out.getvalue().splitlines() if line.strip()]
    line = one_line(said[0]) if said else f"fm arm --handling-delivered exited {code}"
    if code == ExitCode.OK:
        return HandoffResult(True, noop="already acknowledged" in line, message=line)
    if code == ExitCode.CONFLICT:
        return HandoffResult(False, superseded=True, message=line)
    return HandoffResult(False, message=line)


__all__ = ["confirm_with_arm"]
