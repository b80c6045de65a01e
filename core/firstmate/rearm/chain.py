"""Bounds on a conversation's chain of stop-hook continuations, declared by the harness.

Cursor and Codex continue a turn whenever the stop hook asks, with no cap of their own (or one a
user may remove): a :class:`StopChain` says how Firstmate bounds that chain for the harness (the
budgets of :mod:`firstmate.continuity.stopchain`, the environment variables overriding them) and
where its payload names the conversation the chain belongs to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from firstmate.base.envnum import env_int
from firstmate.continuity import stopchain
from firstmate.continuity.stopchain import Bounds, Chain, Charge, Kind
from firstmate.store.home import Home

#: A conversation key goes into the store and, for some harnesses, onto a command line.
KEY_LIMIT = 200


@attrs.frozen
class StopChain:
    """How one harness's chain of continuations is bounded, and whose chain a stop is."""

    #: Continuations that carried no wake (a failed arm, a reminder) before the stop goes
    #: through, and the environment variable overriding it ("" = none).
    block_budget: int = 3
    block_budget_env: str = ""
    #: Consecutive wakes with the same reason that did not clear.
    same_budget: int = 5
    same_budget_env: str = ""
    #: Every continuation of one chain: keep it below any loop limit the harness has.
    ceiling: int = 180
    ceiling_env: str = ""
    #: Payload keys naming the conversation (the first non-empty printable string wins), then
    #: environment variables; a stop that names none is the conversation ``default``.
    conversation_keys: tuple[str, ...] = ("session_id",)
    conversation_env: tuple[str, ...] = ()

    @classmethod
    def knobs(cls, prefix: str, *, ceiling: int = 180, **fields: Any) -> StopChain:
        """The chain whose knobs are ``<prefix>_BLOCK_BUDGET``, ``<prefix>_SAME_REASON_BUDGET``
        and ``<prefix>_LOOP_CEILING``."""
        return cls(block_budget_env=f"{prefix}_BLOCK_BUDGET",
                   same_budget_env=f"{prefix}_SAME_REASON_BUDGET", ceiling=ceiling,
                   ceiling_env=f"{prefix}_LOOP_CEILING", **fields)

    def bounds(self, env: Mapping[str, str]) -> Bounds:
        def knob(name: str, default: int) -> int:
            return env_int(env, name, default) if name else default

        return Bounds(knob(self.block_budget_env, self.block_budget),
                      knob(self.same_budget_env, self.same_budget),
                      knob(self.ceiling_env, self.ceiling))

    def conversation(self, payload: Mapping[str, Any], env: Mapping[str, str]) -> str:
        """The conversation this stop belongs to; "" when neither the payload nor the
        environment names one. A value with a control character is no name at all."""
        for value in (*(payload.get(key) for key in self.conversation_keys),
                      *(env.get(name) for name in self.conversation_env)):
            if isinstance(value, str) and value and value.isprintable():
                return value[:KEY_LIMIT]
        return ""

    def spend(self, home: Home, harness: str, conversation: str, kind: Kind,
              env: Mapping[str, str], reasons: tuple[str, ...] = (), *, reset: bool = False,
              blocked: str = stopchain.NO_WAKE) -> Charge:
        """Charge one more continuation of *kind* to *conversation*'s chain (a fresh chain
        when *reset*); the charge says whether it may go on, and which budget ran out."""
        return stopchain.spend(home, harness, conversation or "default", kind, reasons,
                               self.bounds(env), reset=reset, blocked=blocked)

    def restart(self, home: Home, harness: str, conversation: str) -> None:
        """A healthy watcher was seen: *conversation*'s chain starts afresh."""
        stopchain.save(home, harness, Chain(conversation or "default"))


__all__ = ["KEY_LIMIT", "StopChain"]
