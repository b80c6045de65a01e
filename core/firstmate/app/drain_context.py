"""The crew status a handler needs, printed by ``fm wake drain`` after the drained rows.

Four parts, each only when it has something to say:

1. One annotation per drained signal row, from the crew's status log *at drain time* (so it is
   explicitly not the current state)::

       wake annotation: unread wake-EVENT since last drain, not current state: <crew>.status: <line>
       wake annotation: latest wake-EVENT observed at drain, not current state: <crew>.status: <line>

   The first form lists earlier unread captain-relevant lines of that crew; a ``.turn-ended`` row
   adds ``; historical / not necessarily the triggering event`` and is skipped when a
   ``.status`` row of the same crew is annotated.
2. For each registered crew with a drained ``<crew>.turn-ended`` row (at most four), the last
   eight non-blank lines of its screen, read now as ``fm crew peek`` reads it, from the crew's
   own pane only (:func:`read_screens`), sanitised and each cut to 200 characters::

       SCREEN <crew> (pane <pane>), its last <n> non-blank lines now (the turn ended before):
         | <line>

   or one line saying why it could not be read (``SCREEN <crew> (pane <pane>): not read:
   <reason>``); the drain never fails for it.
3. ``UNREAD STATUS (new since last drain, not re-printed after this presentation):`` with
   ``<crew> <line>`` for every status line reported since the previous presentation that is
   not already annotated above (newest kept when over the byte cap).
4. ``OPEN DECISIONS (still open, folded from the durable status logs - not just the latest
   line):`` with ``<crew> [key=<k>] needs-decision: <note>``, then the command that closes one.

Items are cut to 220 bytes and each part to 4000 bytes (``<PART>: <n> more omitted (byte cap)``).
The whole presentation runs under ``state/status-presentation.lock`` with a bounded wait
(``FM_STATUS_PRESENTATION_LOCK_TIMEOUT``, default 10 s); on timeout it prints
``STATUS PRESENTATION SKIPPED: lock remains held by live pid <P> after <N>s; retry on the next drain.``
and leaves every cursor. Cursors (``state/crew/NAME.drain-cursor``) advance only after the
output was written and flushed.

The rules are plain functions in :mod:`firstmate.fast.crewview` and
:mod:`firstmate.fast.drainview` (shared with the ``fm wake drain`` fast path, which hands a
drain with a registered crew's turn end over to this one: the screens are read here); this
module holds them under the store's bounded lock for the full path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, TextIO

import attrs

from firstmate.base.errors import FirstmateError, LockTimeout
from firstmate.fast import crewview, drainview
from firstmate.fast.crewview import (
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
from firstmate.fast.wakeactor import lock_timeout
from firstmate.store.home import Home

if TYPE_CHECKING:
    from firstmate.fast.crewview import Snapshot
    from firstmate.store.locks import FileLock

#: Longest any one tmux call for a turn-end screen may take (seconds), whatever
#: ``FM_TMUX_TIMEOUT`` allows: the presentation lock is held meanwhile.
SCREEN_TIMEOUT = 2.0
#: Lines of a turn-end screen read (scrollback included), of which the drain shows the last
#: non-blank ones (:data:`firstmate.fast.drainview.SCREEN_LINES`).
SCREEN_READ = 50

#: One crew's screen as read: ``(crew, pane, text or None, why it could not be read)``.
Screen = tuple[str, str, "str | None", "str | None"]
#: Reads the screens of the named crews (the default: :func:`read_screens`).
ScreenReader = Callable[[Home, Mapping[str, str], Sequence[str]], list[Screen]]


class RowLike(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def payload(self) -> str: ...


Row = tuple[str, str, str] | RowLike




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
    #: What ``--json`` shows: the annotations and unread status as lines (``context``), the
    #: open decisions as fields (:func:`firstmate.fast.drainview.decisions`) and the turn-end
    #: screens as fields.
    context: list[str] = attrs.field(factory=list)
    decisions: list[dict[str, object]] = attrs.field(factory=list)
    screens: list[dict[str, object]] = attrs.field(factory=list)

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


def read_screens(home: Home, env: Mapping[str, str], names: Sequence[str]) -> list[Screen]:
    """The screens of the registered crews *names*, each read as ``fm crew peek`` reads it
    (:func:`firstmate.watch.backends.screen.tail`: from the pane the crew is bound to only, not
    a pane that is gone or runs another program now, nor a position not bound yet), through the
    crew backend (``FM_TMUX``, ``FM_TMUX_SOCKET``; each call bounded by
    :data:`SCREEN_TIMEOUT`). Never raises: a crew whose pane cannot be read gets the reason (a
    crew of another host: its pane is read over SSH by ``fm crew peek``, never on the drain's
    path), and once tmux cannot be asked
    at all the rest get the same reason unasked."""
    from firstmate.store import crew as crewmod
    from firstmate.watch.backends import screen
    from firstmate.watch.backends.tmux import UNKNOWN, TmuxBackend

    backend = TmuxBackend.from_env(env)
    backend.timeout = min(backend.timeout, SCREEN_TIMEOUT)
    found: list[Screen] = []
    unasked: str | None = None
    for name in names:
        try:
            member = crewmod.get(home, name)
        except (FirstmateError, OSError) as exc:
            found.append((name, "?", None, f"its registration cannot be read ({exc})"))
            continue
        if member.host is not None:
            found.append((name, member.shown, None, f"the crew works on host {member.host}; "
                                                    f"fm crew peek {name} reads its screen there"))
            continue
        if unasked is not None:
            found.append((name, member.shown, None, unasked))
            continue
        shown = screen.tail(backend, member, SCREEN_READ, drainview.SCREEN_CHARS)
        if shown.read:
            found.append((name, member.shown, "\n".join(shown.lines), None))
        elif shown.state == UNKNOWN:
            unasked = f"tmux could not be asked: {shown.why}"
            found.append((name, member.shown, None, unasked))
        else:
            found.append((name, member.shown, None, f"pane {member.shown} {shown.why}"))
    return found


def _screens(home: Home, env: Mapping[str, str], names: Sequence[str],
             reader: ScreenReader) -> tuple[list[str], list[dict[str, object]]]:
    """The screens' lines and ``--json`` fields for the crews *names* (at most
    :data:`~firstmate.fast.drainview.SCREENS_MAX` are read)."""
    lines: list[str] = []
    fields: list[dict[str, object]] = []
    try:
        read = reader(home, env, names[: drainview.SCREENS_MAX])
    except Exception as exc:  # a screen must never fail the drain
        read = [(name, "?", None, f"{type(exc).__name__}: {exc}") for name in names[: drainview.SCREENS_MAX]]
    for name, pane, text, error in read:
        lines += drainview.screen_lines(name, pane, text, error)
        fields.append({"crew": name, "pane": pane,
                       "lines": None if text is None else drainview.tail(text),
                       "error": None if text is not None else drainview.unread(error)})
    if len(names) > drainview.SCREENS_MAX:
        lines.append(drainview.screens_omitted(len(names) - drainview.SCREENS_MAX))
    return lines, fields


def prepare(home: Home, rows: Iterable[Row], *, env: Mapping[str, str] | None = None,
            reader: ScreenReader | None = None) -> Presentation:
    """Take the lock (bounded) and compute the lines for *rows*
    (:func:`firstmate.fast.crewview.present`), the turn-end screens read (by *reader*, default
    :func:`read_screens`); nothing is advanced yet.

    On a lock timeout the only line is the ``STATUS PRESENTATION SKIPPED`` notice and commit
    changes nothing; when the logs cannot be read it is ``STATUS PRESENTATION INCOMPLETE``.
    """
    from firstmate.store.locks import FileLock

    env = os.environ if env is None else env
    bound = lock_timeout(env)
    lock = FileLock(home.lock_path(LOCK_NAME), LOCK_NAME, home.root)
    try:
        lock.acquire(bound)
    except LockTimeout as exc:
        who = f"live pid {exc.holder_pid}" if exc.holder_pid else "another process"
        return Presentation(home, [f"STATUS PRESENTATION SKIPPED: lock remains held by {who} after "
                                   f"{bound}s; retry on the next drain."])
    fields: list[dict[str, object]] = []

    def screens(names: list[str]) -> list[str]:
        lines, found = _screens(home, env, names, reader or read_screens)
        fields.extend(found)
        return lines

    try:
        lines, snaps, context = crewview.present(str(home.crew_dir), env.get("FM_CAPTAIN_RE"),
                                                 [_triple(row) for row in rows], screens)
        decisions = drainview.decisions(found for snap in snaps for found in snap[3])
    except BaseException:
        lock.release()
        raise
    if not snaps:
        lock.release()
        return Presentation(home, lines)
    return Presentation(home, lines, snaps, lock, context, decisions, fields)


def present(home: Home, rows: Iterable[Row], out: TextIO, *, env: Mapping[str, str] | None = None,
            reader: ScreenReader | None = None) -> None:
    """Print the status presentation for the drained *rows* ((kind, key, payload) each) to *out*."""
    presentation = prepare(home, rows, env=env, reader=reader)
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
           "ITEM_BYTES", "LATEST", "LOCK_NAME", "SCREEN_READ", "SCREEN_TIMEOUT", "SECTION_BYTES",
           "UNREAD_HEADER", "Presentation", "Row", "RowLike", "Screen", "ScreenReader", "lock_timeout", "prepare",
           "present", "read_screens"]
