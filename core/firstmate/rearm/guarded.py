"""The checkpoint-and-guard protocol: the model re-arms itself, the stop hook is the backstop.

For a harness that cannot be woken by a background process (Codex, Grok): the installed
protocol text tells the model to re-arm itself (a foreground ``fm checkpoint``, a tracked
background ``fm arm``: the harness's ``rearm_command``), and the stop hook is the turn-end guard
(:func:`firstmate.guards.turnend.turnend_decision`): while something needs a watcher and none is
healthy it refuses the turn end (a block, or one follow-up, as the harness's ``GuardProfile``
says); once the model has re-armed it lets the turn end.

A harness with no cap on blocks declares a :class:`~firstmate.rearm.chain.StopChain`: each block
is charged to the conversation's chain, which a healthy watcher restarts, and a spent budget
lets the stop through with a notice instead of blocking forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from firstmate.plugin.harness import HarnessInfo, HookOutcome
from firstmate.rearm.chain import StopChain
from firstmate.rearm.reply import HookReply
from firstmate.store.home import Home


@attrs.frozen
class CheckpointGuard:
    """A stop hook that guards a protocol harness's turn end (see the module)."""

    #: How the hook answers, in the harness's terms.
    reply: HookReply = attrs.field(factory=HookReply)
    #: Bounds on the blocks of one conversation, for a harness with no cap of its own.
    chain: StopChain | None = None

    def events(self, info: HarnessInfo) -> tuple[str, ...]:
        """The hook events this strategy answers: the harness's ``rearm_event``."""
        return (info.rearm_event,) if info.rearm_event else ()

    @property
    def receipt(self) -> str:
        """A guard delivers no wake: the model's own re-arm command prints it."""
        return ""

    def run(self, info: HarnessInfo, event: str, payload: Mapping[str, Any] | None, home: Home,
            env: Mapping[str, str]) -> HookOutcome:
        """One turn end of harness *info*: let it end, or refuse it with the guard's banner."""
        reply = self.reply
        if not isinstance(payload, Mapping) or not home.state.is_dir():
            return reply.allow()
        from firstmate.guards.turnend import turnend_decision

        decision = turnend_decision(info.name, payload, home=home, env=env)
        if decision.stands_aside:
            return reply.allow()
        chain = self.chain
        conversation = chain.conversation(payload, env) if chain is not None else ""
        if decision.allowed:
            if chain is not None and decision.why == "healthy":
                chain.restart(home, info.name, conversation)
            return reply.passing(decision.text)
        if chain is not None:
            verdict = chain.spend(home, info.name, conversation, "block", env)
            if not verdict.allowed:
                return reply.notice(f"not blocking this stop: {verdict.notice}")
        return reply.proceed(decision.text)


__all__ = ["CheckpointGuard"]
