"""The crew status a handler needs, printed by ``fm wake drain`` after the drained rows.

Three parts, each only when it has something to say:

1. One annotation per drained signal row, from the crew's status log *at drain time* (so it is
   explicitly not the current state)::

       wake annotation: unread wake-EVENT since last drain, not current state: <crew>.status: <line>
       wake annotation: latest wake-EVENT observed at drain, not current state: <crew>.status: <line>

   The first form lists earlier unread captain-relevant lines of that crew; a ``.turn-ended`` row
   adds ``; historical / not necessarily the triggering event`` and is skipped when a
   ``.status`` row of the same crew is annotated.
2. ``UNREAD STATUS (new since last drain, not re-printed after this presentation):`` with
   ``<crew> <line>`` for every status line reported since the previous presentation that is
   not already annotated above (newest kept when over the byte cap).
3. ``OPEN DECISIONS (still open, folded from the durable status logs - not just the latest
   line):`` with ``<crew> [key=<k>] needs-decision: <note>``, then the command that closes one.

Items are cut to 220 bytes and each part to 4000 bytes (``<PART>: <n> more omitted (byte cap)``).
The whole presentation runs under ``state/status-presentation.lock`` with a bounded wait
(``FM_STATUS_PRESENTATION_LOCK_TIMEOUT``, default 10 s); on timeout it prints
``STATUS PRESENTATION SKIPPED: lock remains held by live pid <P> after <N>s; retry on the next drain.``
and leaves every cursor. Cursors (``state/crew/NAME.drain-cursor``) advance only after the
output was written and flushed.

The rules are plain functions in :mod:`firstmate.base.crewview` (shared with the ``fm wake
drain`` fast path); this module holds them under the store's bounded lock for the full path.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, TextIO

import attrs

from firstmate.base import crewview
from firstmate.base.crewview import (
    DECISIONS_FOOTER,
    DECISIONS_HEADER,
    EARLIER,
    HISTORICAL,
    INCOMPLETE,
    ITEM_BYTES,
    LATEST,
    LOCK_NAME,
    SECTION_BYTES,
    UNREAD_HEADER,
)
from firstmate.base.envnum import env_int
from firstmate.base.errors import FirstmateError, LockTimeout
from firstmate.store.home import Home

if TYPE_CHECKING:
    from firstmate.base.crewview import Snapshot
    from firstmate.store.locks import FileLock

DEFAULT_LOCK_TIMEOUT = 10


class RowLike(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def payload(self) -> str: ...


Row = tuple[str, str, str] | RowLike


def lock_timeout(env: Mapping[str, str]) -> int:
    return env_int(env, "FM_STATUS_PRESENTATION_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT)


def _triple(row: Row) -> tuple[str, str, str]:
    if isinstance(row, tuple):
        return row
    return row.kind, row.key, row.payload


@attrs.define(eq=False)
class Presentation:
    """A prepared presentation: print :attr:`lines`, then :meth:`commit` (or :meth:`abandon`).

    The status-presentation lock is held from :func:`prepare` until commit or abandon.
    """

    home: Home
    lines: list[str]
    _snaps: list[Snapshot] = attrs.field(factory=list)
    _lock: FileLock | None = None

    def commit(self) -> None:
        """The lines were written and flushed: advance the cursors, then release the lock."""
        try:
            if self._lock is not None:
                crewview.advance(str(self.home.crew_dir), self._snaps)
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Release the lock without advancing anything (the next drain presents it again)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()


def prepare(home: Home, rows: Iterable[Row], *, env: Mapping[str, str] | None = None) -> Presentation:
    """Take the lock (bounded) and compute the lines for *rows*; nothing is advanced yet.

    On a lock timeout the only line is the ``STATUS PRESENTATION SKIPPED`` notice and commit
    changes nothing; when the logs cannot be read it is ``STATUS PRESENTATION INCOMPLETE``.
    """
    from firstmate.base.captain import relevance
    from firstmate.store.locks import FileLock

    env = os.environ if env is None else env
    triples = [_triple(row) for row in rows]
    bound = lock_timeout(env)
    lock = FileLock(home.lock_path(LOCK_NAME), LOCK_NAME, home.root)
    try:
        lock.acquire(bound)
    except LockTimeout as exc:
        who = f"live pid {exc.holder_pid}" if exc.holder_pid else "another process"
        return Presentation(home, [f"STATUS PRESENTATION SKIPPED: lock remains held by {who} after "
                                   f"{bound}s; retry on the next drain."])
    try:
        snaps = crewview.snapshot(str(home.crew_dir))
    except (FirstmateError, OSError):
        lock.release()
        return Presentation(home, [INCOMPLETE])
    except BaseException:
        lock.release()
        raise
    lines = crewview.render(snaps, triples, relevance(env.get("FM_CAPTAIN_RE")))
    return Presentation(home, lines, snaps, lock)

def present(home: Home, rows: Iterable[Row], out: TextIO, *, env: Mapping[str, str] | None = None) -> None:
    """Print the status presentation for the drained *rows* ((kind, key, payload) each) to *out*."""
    presentation = prepare(home, rows, env=env)
    try:
        if presentation.lines:
            out.write("\n".join(presentation.lines) + "\n")
        out.flush()
    except BaseException:
        presentation.abandon()
        raise
    # Only now, with the output written, does this presentation count as seen.
    presentation.commit()


__all__ = ["DECISIONS_FOOTER", "DECISIONS_HEADER", "EARLIER", "HISTORICAL", "INCOMPLETE",
           "ITEM_BYTES", "LATEST", "LOCK_NAME", "SECTION_BYTES", "UNREAD_HEADER", "Presentation",
           "Row", "RowLike", "lock_timeout", "prepare", "present"]
