"""The crew status a handler needs after a drain's rows, as plain functions over plain values.

The one implementation of the drain's crew-status presentation, for the ``fm wake drain`` fast
path (:mod:`firstmate.fast.drainpath`) and :mod:`firstmate.app.drain_context` (which documents
what is printed, takes the lock with a bounded wait and reads the turn-end screens through the
crew backend): :func:`present` makes the lines from a :func:`snapshot` of every registered
crew's status log and drain cursor (:func:`render` is its pure part), and :func:`advance`
moves the cursors once the lines were written and flushed; :func:`ended` names the crews whose
turn-end screens a drain shows. Both callers hold ``state/status-presentation.lock``
throughout.

A snapshot is ``(name, unread, latest, decisions, turn)``: the span of lines since the crew's
drain cursor (None: no status log), its newest line not from the captain, its open decisions
(tuples of :mod:`firstmate.fast.crewlog`) and its turn-end marker's signature, read before the
log.

**What a presentation consumes.** Its drain cursor is a presentation mark
(:data:`firstmate.fast.crewlog.Mark`) the watcher's status source honours as well as its own
cursor: a line up to the mark was shown to the captain (annotated, listed under UNREAD STATUS,
or counted in an omission line), so it wakes no one again; a line written after the snapshot
read the log is past the mark and wakes as usual. When the presentation showed lines of a crew
not from the captain, the mark also records the turn-end marker as read before them: that turn
end was shown with them (as a status wake covers the turn end seen with it), and only a later one
wakes. The mark is written only once the lines were written and flushed: a drain that dies
before it leaves everything to be presented and woken again, never lost.
"""

from __future__ import annotations

import os

from firstmate.fast import crewlog
from firstmate.fast.crewlog import DRAIN_CURSOR, PANE, STATUS, TURN_ENDED
from firstmate.fast.crewreport import status_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from firstmate.fast.crewlog import Decision, Line, Span

    Snapshot = tuple[str, Span | None, Line | None, tuple[Decision, ...], str | None]

ITEM_BYTES = 220
SECTION_BYTES = 4000
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


def snapshot(crew_dir: str) -> list[Snapshot]:
    """What every registered crew's status log holds right now."""
    snaps: list[Snapshot] = []
    for name, _pane, _added in crewlog.registered(crew_dir):
        # The marker before the log: a turn end recorded after this read changes it, and so
        # wakes, even when the lines it came with were read.
        turn = crewlog.turn_signature(crewlog.crew_path(crew_dir, name, TURN_ENDED))
        span = crewlog.read_span(crewlog.crew_path(crew_dir, name, STATUS), 0)
        cursor = crewlog.read_cursor(crewlog.crew_path(crew_dir, name, DRAIN_CURSOR))
        unread = span
        if span is not None and cursor is not None and cursor[0] == span[0] and cursor[1] <= span[2]:
            unread = (span[0], cursor[1], span[2],
                      tuple(line for line in span[3] if line[2] >= cursor[1]))
        lines = span[3] if span is not None else ()
        latest = next((line for line in reversed(lines)
                       if not crewlog.from_captain(line[0])), None)
        snaps.append((name, unread, latest, tuple(crewlog.fold_decisions(name, lines)), turn))
    return snaps


def row_keys(snaps: Iterable[Snapshot]) -> frozenset[str]:
    """The row keys :func:`render` can annotate: it passes over every row with another key, so
    a caller holding many rows may hand it only these."""
    return frozenset(name + suffix for name, *_ in snaps for suffix in (STATUS, TURN_ENDED))


def _capped(items: Sequence[str], label: str, *, newest: bool = False) -> list[str]:
    """*items* (each cut to 220 bytes) within 4000 bytes, plus an omission line when some did
    not fit."""
    cut = [crewlog.cut(item, ITEM_BYTES) for item in items]
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


def render(snaps: Sequence[Snapshot], rows: Iterable[tuple[str, str, str]],
           captain: Callable[[str], object], screens: Sequence[str] = ()) -> list[str]:
    """The presentation's lines for the drained *rows* (``(kind, key, payload)`` each);
    *captain* tells the lines that concern the captain
    (:func:`firstmate.fast.captain.relevance`); *screens* (the turn-end screens,
    :func:`firstmate.fast.drainview.screen_lines`) go after the annotations. Pure: reads
    nothing, writes nothing."""
    annotations, unread, decisions = parts(snaps, rows, captain)
    return [*annotations, *screens, *unread, *decisions]


def parts(snaps: Sequence[Snapshot], rows: Iterable[tuple[str, str, str]],
          captain: Callable[[str], object]) -> tuple[list[str], list[str], list[str]]:
    """:func:`render`'s three parts: the annotations, the unread status and the open
    decisions (each with its header and omission line)."""
    by_name = {snap[0]: snap for snap in snaps}
    triples = list(rows)
    status_crews = {key[: -len(STATUS)] for kind, key, _ in triples
                    if kind == "signal" and key.endswith(STATUS)}
    annotations: list[str] = []
    shown: set[tuple[str, int]] = set()
    done: set[str] = set()
    for kind, key, _payload in triples:
        if kind != "signal" or key in done:
            continue
        done.add(key)
        if key.endswith(STATUS):
            name, suffix = key[: -len(STATUS)], ""
        elif key.endswith(TURN_ENDED):
            name, suffix = key[: -len(TURN_ENDED)], HISTORICAL
            if name in status_crews:
                continue
        else:
            continue
        snap = by_name.get(name)
        if snap is None:
            continue
        unread, latest = snap[1], snap[2]
        earlier = [line for line in (unread[3] if unread else ())
                   if not crewlog.from_captain(line[0]) and captain(line[0])
                   and (latest is None or line[2] != latest[2])]
        for line in earlier:
            annotations.append(f"{EARLIER}{name}.status: {crewlog.cut(status_text(line[0]), ITEM_BYTES)}")
            shown.add((name, line[2]))
        if latest is not None:
            annotations.append(f"{LATEST}{name}.status: "
                               f"{crewlog.cut(status_text(latest[0]), ITEM_BYTES)}{suffix}")
            shown.add((name, latest[2]))
        else:
            annotations.append(f"{LATEST}{name}{TURN_ENDED}: (no status line reported){suffix}")
    annotated = _capped(annotations, "wake annotation") if annotations else []

    out: list[str] = []
    unread_items: list[tuple[float, str, int, str]] = []
    for name, unread, _latest, _decisions, _turn in snaps:
        for line in unread[3] if unread else ():
            if crewlog.from_captain(line[0]) or (name, line[2]) in shown:
                continue
            unread_items.append((line[1] or 0.0, name, line[2], f"{name} {status_text(line[0])}"))
    if unread_items:
        unread_items.sort()
        out.append(UNREAD_HEADER)
        out.extend(_capped([item for *_, item in unread_items], "UNREAD STATUS", newest=True))

    decisions = [
        f"{crew} [key={key}] needs-decision: {status_text(note)}".rstrip()
        for snap in snaps for crew, key, note, _at, _keyed in snap[3]
    ]
    listed: list[str] = []
    if decisions:
        listed.append(DECISIONS_HEADER)
        listed.extend(_capped(decisions, "OPEN DECISIONS"))
        listed.append(DECISIONS_FOOTER)
    return annotated, out, listed


def present(crew_dir: str, captain_re: str | None, rows: Iterable[tuple[str, str, str]],
            screens: Callable[[list[str]], Sequence[str]] | None = None
            ) -> tuple[list[str], list[Snapshot], list[str]]:
    """The presentation of both drain paths, under the presentation lock the caller holds:
    the lines for the drained *rows* (``(kind, key, payload)`` each), the snapshot they were
    made from (for :func:`advance`, once they were written) and what ``--json`` shows as
    context (the annotations and the unread status). *captain_re* is ``FM_CAPTAIN_RE``;
    *screens*, given the crews whose turn end was drained (:func:`ended`), gives their screens'
    lines (the full path reads them; the fast path hands such a drain over). A crew's files
    that cannot be read give :data:`INCOMPLETE` alone, and nothing to advance."""
    from firstmate.base.errors import FirstmateError
    from firstmate.fast.captain import relevance

    try:
        snaps = snapshot(crew_dir)
    except (FirstmateError, OSError):
        return [INCOMPLETE], [], []
    keys = row_keys(snaps)
    triples = [row for row in rows if row[1] in keys]  # (all of them, usually: a few)
    captain = relevance(captain_re)
    shown = list(screens(ended(snaps, triples))) if screens is not None else []
    annotations, unread, listed = parts(snaps, triples, captain)
    return [*annotations, *shown, *unread, *listed], snaps, [*annotations, *unread]


def ended(snaps: Iterable[Snapshot], rows: Iterable[tuple[str, str, str]]) -> list[str]:
    """The registered crews whose turn end is among the drained *rows* (signal rows keyed
    ``<crew>.turn-ended``), in the rows' order: the crews whose screens a drain shows."""
    names = {snap[0] for snap in snaps}
    found: list[str] = []
    for kind, key, _payload in rows:
        if kind == "signal" and key.endswith(TURN_ENDED):
            name = key[: -len(TURN_ENDED)]
            if name in names and name not in found:
                found.append(name)
    return found


def advance(crew_dir: str, snaps: Iterable[Snapshot]) -> None:
    """Move each crew's presentation mark (its drain cursor) past what this presentation read,
    with the turn end shown with its lines (see the module docstring; a crew removed since
    keeps none; a mark already there is not rewritten)."""
    for name, unread, _latest, _decisions, turn in snaps:
        if unread is None or not os.path.lexists(crewlog.crew_path(crew_dir, name, PANE)):
            continue
        path = crewlog.crew_path(crew_dir, name, DRAIN_CURSOR)
        old = crewlog.read_mark(path)
        if not any(not crewlog.from_captain(line[0]) for line in unread[3]):
            # Nothing of the crew's own was shown: a turn end shown before still counts.
            turn = old[1] if old is not None else None
        mark = ((unread[0], unread[2]), turn)
        if old != mark:
            crewlog.write_mark(path, mark)


__all__ = ["DECISIONS_FOOTER", "DECISIONS_HEADER", "EARLIER", "HISTORICAL", "INCOMPLETE",
           "ITEM_BYTES", "LATEST", "LOCK_NAME", "SECTION_BYTES", "UNREAD_HEADER", "advance",
           "ended", "parts", "present", "render", "row_keys", "snapshot"]
