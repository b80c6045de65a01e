"""Bounds on a chain of stop-hook continuations, for harnesses with no (or a removable) cap.

A *chain* is the run of stops one conversation makes after its last real user message: each
stop the hook answers with a continuation (a Cursor ``followup_message``, a Codex ``block``)
extends it. Three budgets bound it, and the first one spent lets the stop through:

* ``blocks``: continuations that carried no wake (a failed arm, a drain reminder) — 3 by default;
* ``same``: consecutive wakes with the same canonical reason that did not clear — 5 by default;
* ``ceiling``: every continuation of the chain — kept below any harness loop limit.

The chain lives in the store's ``kv`` table (``stopchain.<harness>``), one JSON object for the
latest conversation: a different conversation key, or the harness saying the stop follows a
real user message, starts a fresh chain.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Literal

import attrs

from firstmate.base.envnum import env_int
from firstmate.store.home import Home

Kind = Literal["wake", "block"]


@attrs.frozen
class Bounds:
    block_budget: int = 3
    same_budget: int = 5
    ceiling: int = 180

    @classmethod
    def from_env(cls, env: Mapping[str, str], prefix: str, *, ceiling: int = 180) -> Bounds:
        """``<prefix>_BLOCK_BUDGET``, ``<prefix>_SAME_REASON_BUDGET``, ``<prefix>_LOOP_CEILING``."""
        return cls(env_int(env, f"{prefix}_BLOCK_BUDGET", 3),
                   env_int(env, f"{prefix}_SAME_REASON_BUDGET", 5),
                   env_int(env, f"{prefix}_LOOP_CEILING", ceiling))


@attrs.frozen
class Chain:
    conversation: str = ""
    blocks: int = 0
    total: int = 0
    reason: str = ""
    same: int = 0

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> Chain:
        try:
            obj = json.loads(text or "")
        except (ValueError, RecursionError):
            return cls()
        if not isinstance(obj, dict):
            return cls()

        def count(name: str) -> int:
            value = obj.get(name)
            return value if type(value) is int and value >= 0 else 0

        conv, reason = obj.get("conversation"), obj.get("reason")
        return cls(conv if isinstance(conv, str) else "", count("blocks"), count("total"),
                   reason if isinstance(reason, str) else "", count("same"))


@attrs.frozen
class Charge:
    """The verdict on one more continuation: ``allowed`` False means the chain is spent and
    ``notice`` says which budget ran out."""

    allowed: bool
    chain: Chain
    notice: str = ""


def canonical(reason: str) -> str:
    """The part of a reason line that names the event: ``stale:`` loses its ``(…)`` detail,
    ``heartbeat…`` is one reason, ``check: <name>`` keeps only the name."""
    line = reason.strip()
    if line.startswith("heartbeat"):
        return "heartbeat"
    if line.startswith("stale:"):
        return line.split(" (", 1)[0]
    if line.startswith("check:"):
        words = line.split()
        return " ".join(words[:2])
    return line


#: What a spent block budget says when the blocks carried no wake.
NO_WAKE = ("without a wake; repair the hook registration and watcher startup before ending "
           "blind")


def charge(chain: Chain, kind: Kind, reasons: tuple[str, ...], bounds: Bounds, *,
           blocked: str = NO_WAKE) -> Charge:
    """Pure: may the chain take one more continuation of *kind*? *blocked* says what the
    block continuations were for, in the notice of a spent block budget."""
    if chain.total >= bounds.ceiling:
        return Charge(False, chain, f"the bounded stop-hook chain reached its diagnostic ceiling "
                                    f"of {bounds.ceiling} continuations")
    if kind == "block":
        if chain.blocks >= bounds.block_budget:
            return Charge(False, chain, f"the stop hook already continued this conversation "
                                        f"{chain.blocks} times {blocked}")
        return Charge(True, attrs.evolve(chain, blocks=chain.blocks + 1, total=chain.total + 1))
    key = " | ".join(sorted({canonical(r) for r in reasons}))
    same = chain.same + 1 if key == chain.reason else 1
    if same > bounds.same_budget:
        return Charge(False, chain, f"the same wake reason has now repeated {same - 1} times "
                                    f"without clearing ({key})")
    return Charge(True, attrs.evolve(chain, total=chain.total + 1, reason=key, same=same))


def _kv_key(harness: str) -> str:
    return "stopchain." + re.sub(r"[^a-z0-9_-]", "", harness)


def load(home: Home, harness: str, conversation: str, *, reset: bool) -> Chain:
    """The chain of *conversation* (fresh when another conversation owns the record or
    *reset*)."""
    from firstmate.store.database import kv_get, open_store

    db = open_store(home)
    try:
        with db.reading() as conn:
            chain = Chain.from_json(kv_get(conn, _kv_key(harness)))
    finally:
        db.close()
    if reset or chain.conversation != conversation:
        return Chain(conversation)
    return chain


def save(home: Home, harness: str, chain: Chain) -> None:
    from firstmate.store.database import kv_set, open_store

    db = open_store(home)
    try:
        with db.transaction(timeout=10.0) as conn:
            kv_set(conn, _kv_key(harness), chain.to_json())
    finally:
        db.close()


def spend(home: Home, harness: str, conversation: str, kind: Kind, reasons: tuple[str, ...],
          bounds: Bounds, *, reset: bool = False, blocked: str = NO_WAKE) -> Charge:
    """Load, charge and (when allowed) store the chain in one call."""
    chain = load(home, harness, conversation, reset=reset)
    verdict = charge(chain, kind, reasons, bounds, blocked=blocked)
    save(home, harness, verdict.chain)
    return verdict


__all__ = ["NO_WAKE", "Bounds", "Chain", "Charge", "canonical", "charge", "load", "save", "spend"]
