"""A parked stop hook: hold a synchronous turn-end hook open on the arm until a wake.

Harnesses that await their stop hook (Cursor always, Codex in its opt-in parked mode) get
tokenless continuity this way: the hook runs ``fm arm`` in the foreground (it starts a watcher or
attaches to a live one), waits for its close, lets the continuity engine start and confirm the
detached successor, and only then returns the wake as the harness's continuation.

Two records in ``state/`` make parks safe to overlap and to lose:

* the *baton* ``<harness>-park-owner`` (identity token of the newest park, written under
  ``<harness>-park-owner.lock``): a newer park takes it and waits (bounded) for the older park to
  notice, stop its arm and exit, so only one park ever holds an arm;
* the *active marker* ``<harness>-park-active``, present while a park runs and removed when it
  ends normally: a marker whose owner is gone records an interrupted park (the hook was killed),
  which the next stop must reconcile before it lets the turn end.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from typing import Literal

import attrs

from firstmate.store.home import Home, atomic_write, open_private

Outcome = Literal["wake", "failed", "superseded", "timeout", "refused"]
#: How often a parked hook checks its baton and deadline while the arm is quiet.
POLL = 0.2
#: Seconds a newer park waits for the park it superseded to exit.
HANDOVER = 15.0


@attrs.frozen
class ParkResult:
    outcome: Outcome
    #: The complete wake text (``wake``), or the one failure line (``failed``/``refused``).
    text: str = ""
    reasons: tuple[str, ...] = ()


def _token() -> str:
    from firstmate.store.identity import identity_of

    me = identity_of(os.getpid())
    return me.token() if me is not None else f"{os.getpid()}:unknown"


def _live(token: str) -> bool:
    from firstmate.store.identity import ProcessIdentity, matches

    ident = ProcessIdentity.parse(token.strip())
    return ident is not None and matches(ident)


def _read(path: os.PathLike[str] | str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(4096).strip()
    except OSError:
        return ""


@attrs.define(eq=False)
class Baton:
    home: Home
    harness: str
    token: str = attrs.field(factory=_token)

    @property
    def path(self) -> os.PathLike[str]:
        return self.home.state / f"{self.harness}-park-owner"

    def take(self, handover: float = HANDOVER) -> None:
        """Become the newest park; wait for the superseded one to let go (bounded)."""
        import fcntl

        fd = open_private(self.home.lock_path(f"{self.harness}-park-owner"))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            previous = _read(self.path)
            atomic_write(self.home.state / f"{self.harness}-park-owner", self.token.encode())
        finally:
            os.close(fd)
        if previous and previous != self.token:
            deadline = time.monotonic() + handover
            while _live(previous) and time.monotonic() < deadline:
                time.sleep(0.05)

    def held(self) -> bool:
        return _read(self.path) == self.token

    def release(self) -> None:
        import fcntl

        with contextlib.suppress(OSError):
            fd = open_private(self.home.lock_path(f"{self.harness}-park-owner"))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if self.held():
                    os.unlink(self.path)
            finally:
                os.close(fd)


def marker_path(home: Home, harness: str) -> os.PathLike[str]:
    return home.state / f"{harness}-park-active"


def interrupted(home: Home, harness: str) -> bool:
    """A park marker is left by a park that is no longer running."""
    token = _read(marker_path(home, harness))
    return bool(token) and not _live(token)


def clear_interrupted(home: Home, harness: str) -> None:
    path = marker_path(home, harness)
    token = _read(path)
    if token and not _live(token):
        with contextlib.suppress(OSError):
            os.unlink(path)


def park(home: Home, harness: str, env: Mapping[str, str], *, seconds: float,
         display_name: str | None = None) -> ParkResult:
    """Run one parked cycle for *harness* (see the module docstring). Never raises for an arm
    or engine problem: every path ends in a :class:`ParkResult`."""
    from firstmate.continuity.engine import Continuity
    from firstmate.continuity.enginevalues import ContinuityRefused
    from firstmate.plugin.handoff import Session

    baton = Baton(home, harness)
    baton.take()
    _claim_session_lock(home, env)
    atomic_write(home.state / f"{harness}-park-active", baton.token.encode())
    arm = None
    finished = False
    try:
        engine = Continuity.for_session(Session(home, harness, env), display_name=display_name,
                                        detached=True)
        try:
            arm = engine.foreground()
        except ContinuityRefused as exc:
            finished = True
            return ParkResult("refused", str(exc))
        except OSError as exc:
            finished = True
            return ParkResult("failed", f"watcher: FAILED - the arm could not be started ({exc})")
        readiness = engine.await_readiness(arm)
        if arm.reasons():
            readiness = None  # closed on a wake at once: fall through to the close
        elif readiness is None or not readiness.ready:
            line = readiness.line if readiness is not None and readiness.line else (
                "watcher: FAILED - no live watcher with a fresh beacon")
            _stop(arm)
            finished = True
            return ParkResult("failed", line)
        deadline = time.monotonic() + seconds
        while not arm.wait_settled(POLL):
            if not baton.held():
                _stop(arm)
                finished = True
                return ParkResult("superseded")
            if time.monotonic() >= deadline:
                _stop(arm)
                if arm.reasons():
                    break
                finished = True
                return ParkResult("timeout")
        close = arm.close_value()
        if not close.actionable:
            failed = [line for line in arm.lines() if line.startswith("watcher: FAILED")]
            finished = True
            return ParkResult("failed", failed[-1] if failed else
                              "watcher: FAILED - cycle ended without an actionable reason")
        wake, _receipt = engine.handle_close(close)
        finished = True
        return ParkResult("wake", wake.text, wake.reasons)
    finally:
        if arm is not None and arm.alive and not finished:
            _stop(arm)  # an exception on the way: never leave our arm behind
        if finished:
            with contextlib.suppress(OSError):
                if _read(marker_path(home, harness)) == baton.token:
                    os.unlink(marker_path(home, harness))
        baton.release()


def _claim_session_lock(home: Home, env: Mapping[str, str]) -> None:
    """A parked hook runs inside its harness session: it takes a free or stale session lock
    for that session (as ``fm lock acquire`` would), and never touches a live other owner's."""
    from firstmate.continuity import session_lock

    with contextlib.suppress(Exception):
        if session_lock.inspect(home).state in ("free", "stale"):
            session_lock.acquire(home, env)


def _stop(arm: object) -> None:
    from firstmate.continuity.armchild import ArmChild

    assert isinstance(arm, ArmChild)
    if arm.alive:
        arm.terminate()
    if not arm.wait_exit(15.0):
        arm.kill()
        arm.wait_exit(5.0)


__all__ = ["Baton", "ParkResult", "clear_interrupted", "interrupted", "marker_path", "park"]
