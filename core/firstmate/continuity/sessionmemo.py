"""The session lock's verdict memo, ``state/session.verified``: what ``fm lock acquire`` leaves
once it has judged its holder live, so that ``fm status`` can call the lock held without
loading the holder's harness plugin (:mod:`firstmate.fast.sessionview` reads it and says what
it is tied to)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from firstmate.continuity.sessionrecord import SessionRecord
from firstmate.fast import sessionview
from firstmate.store.home import Home, atomic_write


def remember(home: Home, record: SessionRecord, live: Callable[[SessionRecord], bool]) -> None:
    """With *record* just written or kept: the memo of its holder when *live* (the full
    judgement, :mod:`firstmate.continuity.session_lock`'s probe and classify as ``fm status``
    runs them) calls it live as a named harness now, else no memo. Best effort: without a memo
    ``fm status`` only takes its full path."""
    forget(home)
    if record.pid <= 0 or record.harness in ("", "unknown"):
        return  # judged without a plugin: the status needs no memo
    view = sessionview.process_view(record.pid)
    if (view is None or not live(record)
            or sessionview.process_view(record.pid) != view):  # (exec'd while judged)
        return
    text = sessionview.memo_text(record.identity, record.harness, view,
                                 sessionview.table_key(os.environ))
    try:
        atomic_write(home.state / sessionview.MEMO, text.encode())
    except OSError:
        forget(home)


def forget(home: Home) -> None:
    """No memo (the lock is released or passes to another holder)."""
    with contextlib.suppress(OSError):
        os.unlink(home.state / sessionview.MEMO)


__all__ = ["forget", "remember"]
