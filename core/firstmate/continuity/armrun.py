"""``fm arm`` as a process: stop signals become one ``watcher: FAILED - arm interrupted …`` line,
a disposable checkout and an unsafe home are refused, and the mode asked for runs
(:mod:`firstmate.continuity.armargs`): the default arm, or a control mode
(:mod:`firstmate.continuity.armcontrol`)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import TextIO

from firstmate.base import stopsignals
from firstmate.base.exitcodes import ExitCode
from firstmate.base.quickgate import crew_marker
from firstmate.continuity.arm import Arm
from firstmate.continuity.armargs import parse_args
from firstmate.store.database import Store
from firstmate.store.health import LOCK_NAME
from firstmate.store.home import Home, refuse_symlink, resolve_root
from firstmate.watch.watcher import code_dir, disposable_checkout


class Interrupted(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum: int, frame: FrameType | None) -> None:
    stopsignals.block()
    raise Interrupted(signum)



def run(argv: Sequence[str], env: Mapping[str, str] | None = None,
        out: TextIO | None = None) -> int:
    """``fm arm``: returns the exit status (see docs/cli.md)."""
    from firstmate.continuity import armcontrol, armstop
    from firstmate.store.identity import current

    mode = parse_args(argv)
    env = dict(os.environ if env is None else env)
    out = sys.stdout if out is None else out
    # Held from before the handlers exist until inside the try, so no stop lands in between.
    stopsignals.block()
    previous = stopsignals.install(_interrupt, unblock_now=False)
    arm: Arm | None = None
    try:
        stopsignals.unblock()  # a stop pending since our spawn is handled by the except below
        refused = disposable_checkout(code_dir(), env)
        if refused is not None:
            out.write("watcher: FAILED - refusing to arm from a disposable validation checkout: "
                      f"{refused}\n")
            out.flush()
            return ExitCode.FAILED
        crew = crew_marker(env)
        if crew is not None:
            # A crew reads the project it works in, primary protocols included: whatever they
            # tell its model, only the captain arms the home's watcher (or stops it).
            out.write(f"watcher: FAILED - refusing to arm in a crew's session ({crew}): only the "
                      "captain arms the watcher; report with fm crew status\n")
            out.flush()
            return ExitCode.FAILED
        home = Home(resolve_root(env))
        if mode.name in ("arm", "restart", "take-over"):
            home.ensure(announce=env)
        # The singleton is inspected (and a holder signalled) through these paths: a symlink
        # there is unsafe state (exit 4), not an unverifiable holder to wait for.
        for path in (home.root, home.state):
            refuse_symlink(path)
        if mode.name == "stop" and not home.state.is_dir():
            # No home (a fresh or mistyped FM_HOME) or no state: no watcher can hold it, and
            # there is no ground to have lost.
            where = (f"no state directory in {home.root}" if home.root.is_dir()
                     else f"no home at {home.root}")
            Arm.write_line(out, f"watcher: none running ({where})")
            return ExitCode.OK
        if home.state.is_dir():
            refuse_symlink(home.lock_path(LOCK_NAME))
        arm = Arm(home, env, out, current(), Store(home))
        gone = arm.ground()
        if gone is not None:
            return arm.ground_failed(gone)
        try:
            if mode.name == "stop":
                return armcontrol.stop(arm)
            if mode.name == "restart":
                return armcontrol.restart(arm)
            if mode.name == "take-over":
                return armcontrol.take_over(arm, mode.arm_pid)
            if mode.name == "handling-delivered":
                assert mode.generation is not None and mode.watcher_pid is not None
                return armcontrol.handling_delivered(arm, mode.generation, mode.watcher_pid)
            return arm.arm()
        except Interrupted as stop:
            return armstop.interrupted(arm, stop.signum)
        finally:
            arm.db.close()
    except Interrupted as stop:
        # Interrupted outside a cycle (while setting up, or closing the store): the caller
        # still gets its one line, unless the reason itself is already out.
        what = f"arm interrupted by {signal.Signals(stop.signum).name}"
        if arm is None:
            Arm.write_line(out, f"watcher: FAILED - {what}")
        elif arm.reason is None and not any(line.startswith("watcher: FAILED - ")
                                            for line in arm.printed):
            arm.fail(what)
        return 128 + stop.signum
    finally:
        stopsignals.restore(previous)


__all__ = ["run"]
