"""What drains presented: the highest row each actor was shown and the generations the
acknowledgement commands named, kept in ``kv`` so an acknowledgement can refuse what nobody was
asked for (:mod:`firstmate.store.drain`). The functions are :mod:`firstmate.base.presentedrow`'s
(shared with the ``fm wake drain`` fast path). A branch grant that gives its rows back forgets its
actor's record (:mod:`firstmate.store.grants`)."""

from __future__ import annotations

from firstmate.base.presentedrow import (
    GENERATIONS_KEPT,
    GENERATIONS_KEY,
    PRESENTED_KEY,
    forget_presented,
    presented_through,
    printed_generations,
    record,
)

__all__ = [
    "GENERATIONS_KEPT",
    "GENERATIONS_KEY",
    "PRESENTED_KEY",
    "forget_presented",
    "presented_through",
    "printed_generations",
    "record",
]
