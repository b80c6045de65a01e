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
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, TextIO

import attrs

from firstmate.base.envnum import env_int
from firstmate.base.errors import FirstmateError, LockTimeout
from firstmate.store import crew as crewmod
from firstmate.store.home import Home

if TYPE_CHECKING:
    from firstmate.store.locks import FileLock

ITEM_BYTES = 220
SECTION_BYTES = 4000
DEFAULT_LOCK_TIMEOUT = 10
LOCK_NAME = "status-presentation"

LATEST = "wake annotation: latest wake-EVENT observed at drain, not current state: "
EARLIER = "wake annotation: unread wake-EVENT since last drain, not current state: "
HISTORICAL = "; historical / not necessarily the triggering event"
UNREAD_HEADER = "UNREAD STATUS (new since last drain, not re-printed after this presentation):"
DECISIONS_HEADER = (
    "OPEN DECISIONS (still open, folded from the durable status logs - not just the latest line):"
)
DECISIONS_FOOTER = (
    'OPEN DECISIONS: close one by answering it: fm crew answer <crew> --key <key> "<answer>"'
)
INCOMPLETE = "STATUS PRESENTATION INCOMPLETE: status snapshot could not be read."


class RowLike(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def payload(self) -> str: ...


Row = tuple[str, str, str] | RowLike


@attrs.frozen
class CrewSnapshot:
    name: str
    unread: crewmod.Span | None
    latest: crewmod.StatusLine | None
    decisions: tuple[crewmod.Decision, ...]


def lock_timeout(env: Mapping[str, str]) -> int:
    return env_int(env, "FM_STATUS_PRESENTATION_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT)


def _triple(row: Row) -> tuple[str, str, str]:
    if isinstance(row, tuple):
        return row
    return row.kind, row.key, row.payload


def snapshot(home: Home) -> list[CrewSnapshot]:
    """What every registered crew's status log holds right now."""
    snaps = []
    for member in crewmod.list(home):
        span = crewmod.read_span(crewmod.path(home, member.name, crewmod.STATUS), 0)
        cursor = crewmod.read_cursor(crewmod.path(home, member.name, crewmod.DRAIN_CURSOR))
        unread = span
        if span is not None and cursor is not None and cursor.inode == span.inode and cursor.offset <= span.end:
            unread = crewmod.Span(span.inode, cursor.offset, span.end,
                                  tuple(line for line in span.lines if line.start >= cursor.offset))
        lines = span.lines if span is not None else ()
        latest = next((line for line in reversed(lines) if not line.from_captain), None)
        decisions = tuple(crewmod.fold_decisions(member.name, lines))
        snaps.append(CrewSnapshot(member.name, unread, latest, decisions))
    return snaps


def _text(line: crewmod.StatusLine) -> str:
    return crewmod.clean_text(line.text)


def _capped(items: Sequence[str], label: str, *, newest: bool = False) -> list[str]:
    """*items* (each cut to 220 bytes) within 4000 bytes, plus an omission line when some did not fit."""
    cut = [crewmod.cut(item, ITEM_BYTES) for item in items]
    order = list(reversed(cut)) if newest else cut
    kept: list[str] = []
    used = 0
    for item in order:
        size = len(item.encode("utf-8")) + 1
        if used + size > SECTION_BYTES:
            break
        kept.append(item)
        used += size
    omitted = len(cut) - len(kept)
    if newest:
        kept.reverse()
    if omitted:
        kept.append(f"{label}: {omitted} more omitted (byte cap)")
    return kept


def render(snaps: Sequence[CrewSnapshot], rows: Iterable[Row], captain: re.Pattern[str]) -> list[str]:
    """The presentation's lines (pure: reads nothing, writes nothing)."""
    by_name = {snap.name: snap for snap in snaps}
    triples = [_triple(row) for row in rows]
    status_crews = {key[: -len(crewmod.STATUS)] for kind, key, _ in triples
                    if kind == "signal" and key.endswith(crewmod.STATUS)}
    annotations: list[str] = []
    shown: set[tuple[str, int]] = set()
    done: set[str] = set()
    for kind, key, _payload in triples:
        if kind != "signal" or key in done:
            continue
        done.add(key)
        if key.endswith(crewmod.STATUS):
            name, suffix = key[: -len(crewmod.STATUS)], ""
        elif key.endswith(crewmod.TURN_ENDED):
            name, suffix = key[: -len(crewmod.TURN_ENDED)], HISTORICAL
            if name in status_crews:
                continue
        else:
            continue
        snap = by_name.get(name)
        if snap is None:
            continue
        latest = snap.latest
        earlier = [line for line in (snap.unread.lines if snap.unread else ())
                   if not line.from_captain and captain.search(line.text)
                   and (latest is None or line.start != latest.start)]
        for line in earlier:
            annotations.append(f"{EARLIER}{name}.status: {crewmod.cut(_text(line), ITEM_BYTES)}")
            shown.add((name, line.start))
        if latest is not None:
            annotations.append(f"{LATEST}{name}.status: {crewmod.cut(_text(latest), ITEM_BYTES)}{suffix}")
            shown.add((name, latest.start))
        else:
            annotations.append(f"{LATEST}{name}{crewmod.TURN_ENDED}: (no status line reported){suffix}")
    out = _capped(annotations, "wake annotation") if annotations else []

    unread: list[tuple[float, str, int, str]] = []
    for snap in snaps:
        for line in snap.unread.lines if snap.unread else ():
            if line.from_captain or (snap.name, line.start) in shown:
                continue
            unread.append((line.at or 0.0, snap.name, line.start, f"{snap.name} {_text(line)}"))
    if unread:
        unread.sort()
        out.append(UNREAD_HEADER)
        out.extend(_capped([item for *_, item in unread], "UNREAD STATUS", newest=True))

    decisions = [
        f"{d.crew} [key={d.key}] needs-decision: {crewmod.clean_text(d.note)}".rstrip()
        for snap in snaps for d in snap.decisions
    ]
    if decisions:
        out.append(DECISIONS_HEADER)
        out.extend(_capped(decisions, "OPEN DECISIONS"))
        out.append(DECISIONS_FOOTER)
    return out


def advance(home: Home, snaps: Iterable[CrewSnapshot]) -> None:
    """Move each crew's drain cursor past what this presentation read."""
    for snap in snaps:
        if snap.unread is None or not crewmod.exists(home, snap.name):
            continue
        p = crewmod.path(home, snap.name, crewmod.DRAIN_CURSOR)
        cursor = crewmod.Cursor(snap.unread.inode, snap.unread.end)
        if crewmod.read_cursor(p) != cursor:
            crewmod.write_cursor(p, cursor)


@attrs.define(eq=False)
class Presentation:
    """A prepared presentation: print :attr:`lines`, then :meth:`commit` (or :meth:`abandon`).

    The status-presentation lock is held from :func:`prepare` until commit or abandon.
    """

    home: Home
    lines: list[str]
    _snaps: list[CrewSnapshot] = attrs.field(factory=list)
    _lock: FileLock | None = None

    def commit(self) -> None:
        """The lines were written and flushed: advance the cursors, then release the lock."""
        try:
            if self._lock is not None:
                advance(self.home, self._snaps)
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
    from firstmate.store.captain import captain_pattern
    from firstmate.store.locks import FileLock

    env = os.environ if env is None else env
    rows = list(rows)
    bound = lock_timeout(env)
    lock = FileLock(home.lock_path(LOCK_NAME), LOCK_NAME, home.root)
    try:
        lock.acquire(bound)
    except LockTimeout as exc:
        who = f"live pid {exc.holder_pid}" if exc.holder_pid else "another process"
        return Presentation(home, [f"STATUS PRESENTATION SKIPPED: lock remains held by {who} after "
                                   f"{bound}s; retry on the next drain."])
    try:
        snaps = snapshot(home)
    except (FirstmateError, OSError):
        lock.release()
        return Presentation(home, [INCOMPLETE])
    except BaseException:
        lock.release()
        raise
    lines = render(snaps, rows, captain_pattern(env.get("FM_CAPTAIN_RE"))[0])
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
