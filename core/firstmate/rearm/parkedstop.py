"""The parked stop hook: a synchronous turn-end hook that parks on the watcher until a wake.

For a harness that awaits its stop hook and takes its answer as the next user message (Cursor,
Codex in its parked mode, the plugin template). The hook stands aside where the turn-end guard
says there is nothing for this session to watch; otherwise it parks
(:func:`firstmate.continuity.park.park`: it arms a watcher or attaches to the live one, waits
for the close, lets the continuity engine start and confirm the successor) and only then
answers with the wake. The next turn end parks on that successor, so the fleet stays watched
with no help from the model.

A harness with no cap on continuations declares a :class:`~firstmate.rearm.chain.StopChain`:
every continuation is charged to the conversation's chain, which starts afresh when the payload
says the stop follows a real user message (the harness's ``GuardProfile.loop_flags`` say no
continuation ran), and the first budget spent lets the stop through with a notice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from firstmate.base.envnum import env_int
from firstmate.plugin.harness import HarnessInfo, HookOutcome
from firstmate.rearm.chain import StopChain
from firstmate.rearm.reply import HookReply
from firstmate.store.home import Home

#: The continuation a :attr:`ParkedStop.drain_first` hook gives instead of parking.
DRAIN = ("FIRSTMATE_OP: Firstmate has unfinished supervision work: {why}. Run fm wake drain, "
         "handle what it shows and run the acknowledgement it prints, and reconcile before "
         "ending the turn. Continuity is automatic; do not arm the watcher by hand.")


def queued(home: Home) -> int:
    """Rows waiting in the wake queue."""
    from firstmate.store import queue
    from firstmate.store.database import open_store

    db = open_store(home)
    try:
        with db.reading() as conn:
            return queue.depth(conn)
    finally:
        db.close()


@attrs.frozen
class ParkedStop:
    """A stop hook that parks on the watcher and answers with the wake (see the module)."""

    #: How the hook answers, in the harness's terms.
    reply: HookReply = attrs.field(factory=HookReply)
    #: Seconds one park waits for a wake (keep it below the hook timeout the install writes),
    #: and the environment variable overriding it ("" = none).
    park_seconds: int = 28000
    park_seconds_env: str = ""
    #: Bounds on the chain of continuations, for a harness with no cap of its own.
    chain: StopChain | None = None
    #: Before parking, refuse to end the turn blind while wakes wait in the queue or an
    #: earlier park was interrupted: answer with a reminder to drain instead (charged to the
    #: chain as a block).
    drain_first: bool = False
    #: The payload key saying how the turn ended, for a harness that also calls its stop hook
    #: after an aborted or failed turn: any value but ``completed`` stands aside (the user
    #: stopped it; never park on that). "" when every stop is a completed turn.
    status_key: str = ""

    def events(self, info: HarnessInfo) -> tuple[str, ...]:
        """The hook events this strategy answers: the harness's ``rearm_event``."""
        return (info.rearm_event,) if info.rearm_event else ()

    @property
    def receipt(self) -> str:
        """How the engine's wake reaches the model: the parked hook prints it."""
        return f"returned by the parked stop hook: {self.reply.describe()}"

    def run(self, info: HarnessInfo, event: str, payload: Mapping[str, Any] | None, home: Home,
            env: Mapping[str, str]) -> HookOutcome:
        """One turn end of harness *info*: stand aside, remind, or park and answer."""
        reply = self.reply
        if not isinstance(payload, Mapping) or not home.state.is_dir():
            return reply.allow()
        if self.status_key and payload.get(self.status_key, "completed") != "completed":
            return reply.allow()
        from firstmate.guards.turnend import loop_active, turnend_decision

        if turnend_decision(info.name, payload, home=home, env=env).stands_aside:
            return reply.allow()
        turn = _Turn(self, info, home, env, payload,
                     fresh=not loop_active(info.guard.loop_flags, payload))
        if self.drain_first:
            reminder = turn.remind()
            if reminder is not None:
                return reminder
        return turn.park()


@attrs.define
class _Turn:
    """One parked turn end: the strategy, the harness and what its payload says."""

    strategy: ParkedStop
    info: HarnessInfo
    home: Home
    env: Mapping[str, str]
    payload: Mapping[str, Any]
    #: The stop follows a real user message: the chain starts afresh.
    fresh: bool

    @property
    def conversation(self) -> str:
        chain = self.strategy.chain
        return chain.conversation(self.payload, self.env) if chain is not None else ""

    def _charge(self, kind: str, reasons: tuple[str, ...] = (), **more: Any) -> str | None:
        """None when the chain takes one more continuation of *kind*, else why not."""
        chain = self.strategy.chain
        if chain is None:
            return None
        verdict = chain.spend(self.home, self.info.name, self.conversation,
                              "wake" if kind == "wake" else "block", self.env, reasons,
                              reset=self.fresh, **more)
        return None if verdict.allowed else verdict.notice

    def remind(self) -> HookOutcome | None:
        """The drain reminder when wakes are queued or a park was interrupted, else None."""
        from firstmate.continuity import park as parking

        why = []
        depth = queued(self.home)
        if depth:
            why.append(f"{depth} queued wake{'s' if depth != 1 else ''}")
        if parking.interrupted(self.home, self.info.name):
            why.append("an interrupted stop-hook park")
        if not why:
            return None
        # The chain's notice names the real cause: wakes left unacknowledged, not a broken hook.
        spent = self._charge("block", blocked=f"to drain {' and '.join(why)}, and they are "
                                              "still there; run fm wake drain, handle the "
                                              "wakes and run the acknowledgement command it "
                                              "prints")
        if spent is not None:
            return self.strategy.reply.notice(spent)
        parking.clear_interrupted(self.home, self.info.name)
        return self.strategy.reply.proceed(DRAIN.format(why=" and ".join(why)))

    def park(self) -> HookOutcome:
        from firstmate.base.waketext import compose
        from firstmate.continuity.park import park

        strategy, reply = self.strategy, self.strategy.reply
        seconds = (env_int(self.env, strategy.park_seconds_env, strategy.park_seconds)
                   if strategy.park_seconds_env else strategy.park_seconds)
        result = park(self.home, self.info.name, self.env, seconds=seconds,
                      display_name=self.info.display_name)
        if result.outcome in ("superseded", "timeout"):
            return reply.allow()  # a newer park owns the watch, or the park ran out of time
        if result.outcome == "wake":
            spent = self._charge("wake", result.reasons)
            if spent is not None:
                return reply.notice(f"not continuing: {spent}. Run fm wake drain and handle "
                                    "what it shows.")
            return reply.proceed(result.text)
        spent = self._charge("block")
        if spent is not None:
            files = ", ".join(self.info.config_files) or "its hooks file"
            return reply.notice(f"not blocking this stop: the {self.info.display_name} stop "
                                f"hook's arm still fails after the bounded chain ({spent}); "
                                f"repair {files} registration and watcher startup before "
                                "ending blind")
        return reply.proceed(compose((), result.text, self.info.display_name))


__all__ = ["DRAIN", "ParkedStop", "queued"]
