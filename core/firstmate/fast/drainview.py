"""What ``fm wake drain`` prints, as plain functions over plain values: the one presentation
both drain paths use (the attrs-free fast path, :mod:`firstmate.fast.drainpath`, and the
store's, :mod:`firstmate.cli.wake`), so they print the same bytes by construction.

A drain's text, in order (stdout, then the acknowledgement on stderr):

1. at most one line saying, in plain words, what the recovery episode behind this drain means
   (:func:`episode_note`): a watcher that was not running (a ``check: rearm-resurface`` wake),
   or an open episode with nothing queued;
2. the rows, one section per kind (:data:`SECTIONS`): a header naming the kind, how many rows
   and, in one plain line, what such a row means and what to do, then one line per row,
   ``  #<seq> <payload>`` (``  #<seq> [<key>] <payload>`` when the payload does not name its
   key) (:func:`pieces`);
3. the ``WAKE ROWS HELD BY SUPERVISION BRANCH: …`` line, or :data:`NOTHING` when there is
   nothing at all to handle or acknowledge;
4. the crew-status context (:mod:`firstmate.fast.crewview`, with the turn-end screens of
   :func:`screen_lines`) and any drain-context hook's lines;
5. on stderr, last, ``WAKE_ACK_REQUIRED: after handling completes run <command>``.

Every text from a row or a crew goes through :func:`firstmate.base.wakeinput.clean`, the one
sanitiser of crew text. :func:`ack_line` words an acknowledgement's one-line confirmation and
:func:`decisions` the structured open decisions of ``fm wake drain --json``.
"""

from __future__ import annotations

import time

from firstmate.base.wakeinput import clean
from firstmate.fast.wakeactor import ack_required

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Iterator, Sequence
    from typing import Any, TextIO

    from firstmate.fast.episoderow import State

#: Each kind's section, in the order they are printed: its title and, in plain words, what a row
#: of the kind means and what to do about it.
SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("signal", "SIGNALS", "a crew reported a status line, ended a turn or closed its pane (or a "
     "script signalled): read each one and act on it"),
    ("check", "CHECKS", "a registered state check reported (fm check list shows them): fix what "
     "its reason names"),
    ("stale", "STALE PANES", "a crew's screen stopped changing while it did not look busy, so it "
     "may be stuck or waiting for input: look at its screen (fm crew peek NAME), then steer it "
     '(fm crew steer NAME "...") or stop it (fm crew stop NAME)'),
    ("heartbeat", "HEARTBEAT", "nothing woke you for a long while: look over the fleet "
     "(fm status, fm crew list) and check on crews that went quiet"),
)
ORDER = tuple(kind for kind, _title, _what in SECTIONS)
#: The line of a drain with nothing to handle, nothing held and nothing to acknowledge.
NOTHING = "WAKES: nothing queued for you and no recovery episode open: nothing to handle or acknowledge."
#: Rows per piece of :func:`pieces`: about 100 KB of lines for typical rows.
PIECE_ROWS = 1000
#: The turn-end screens: at most this many crews, this many non-blank lines each (the last
#: ones), each cut to this many characters.
SCREENS_MAX = 4
SCREEN_LINES = 8
SCREEN_CHARS = 200


def header(kind: str, count: int) -> str:
    """The header of *kind*'s section of *count* rows."""
    for known, title, what in SECTIONS:
        if known == kind:
            return f"{title} ({count} row{'' if count == 1 else 's'}): {what}."
    return f"{clean(kind).upper()} ({count}):"  # (a kind the queue refuses: never shown)


def explanations(kinds: Iterable[str]) -> list[str]:
    """``<kind>: <what it means and what to do>`` for each of *kinds*, in section order."""
    present = set(kinds)
    return [f"{kind}: {what}" for kind, _title, what in SECTIONS if kind in present]


def line(seq: int, kind: str, key: str, payload: str) -> str:
    """One row's line (without its newline): ``  #<seq> <payload>``, the key in brackets
    before the payload when the payload does not name it."""
    key, payload = clean(key), clean(payload)
    if key in payload:
        return f"  #{seq} {payload}"
    return f"  #{seq} [{key}] {payload}"


def sections(rows: Sequence[tuple[Any, ...]], kinds: Collection[str] | None = None
             ) -> list[tuple[str, Sequence[tuple[Any, ...]]]]:
    """*rows* (``(seq, kind, key, payload, ...)``) grouped by kind, in section order (a kind
    the queue would refuse last), each group in the order given; *kinds*, when the caller
    knows them, are the rows' kinds."""
    kinds = {row[1] for row in rows} if kinds is None else set(kinds)
    if len(kinds) < 2:  # the usual case: no copy of the rows
        return [(kinds.pop(), rows)] if kinds else []
    order = [kind for kind in ORDER if kind in kinds]
    if len(order) < len(kinds):  # a kind the queue would refuse: last, in first-seen order
        order += dict.fromkeys([row[1] for row in rows if row[1] not in ORDER])
    return [(kind, [row for row in rows if row[1] == kind]) for kind in order]


def pieces(rows: Sequence[tuple[Any, ...]], kinds: Collection[str] | None = None) -> Iterator[str]:
    """The row sections of *rows* (``(seq, kind, key, payload, ...)``, deduped), each line
    ending in a newline, in pieces of :data:`PIECE_ROWS` rows. A piece of printable ASCII
    (which :func:`~firstmate.base.wakeinput.clean` leaves as it is) is built at once. Each
    piece is made when it is asked for, because a drain of thousands of rows is a fresh
    process: a piece written and dropped before the next is built lends that one its memory
    (its strings, its bytes, the stream's encoding of it) instead of the process faulting in
    new pages for the whole text."""
    for kind, group in sections(rows, kinds):
        yield header(kind, len(group)) + "\n"
        for start in range(0, len(group), PIECE_ROWS):
            part = group[start:start + PIECE_ROWS]
            # Unpacked by their exact width (the fast path's rows carry a fifth field): a loop
            # that unpacks costs less than one that indexes, at thousands of rows.
            if len(part[0]) == 5:
                joined = "".join([f"  #{s} {p}\n" if k in p else f"  #{s} [{k}] {p}\n"
                                  for s, _kind, k, p, _flag in part])
            else:
                joined = "".join([f"  #{r[0]} {r[3]}\n" if r[2] in r[3]
                                  else f"  #{r[0]} [{r[2]}] {r[3]}\n" for r in part])
            if not plain(joined, len(part)):
                joined = "".join([line(r[0], r[1], r[2], r[3]) + "\n" for r in part])
            yield joined


def plain(lines: str, count: int) -> bool:
    """*lines* (*count* lines, each ending in a newline) hold nothing but printable ASCII and
    their newlines, which :func:`~firstmate.base.wakeinput.clean` leaves as it is."""
    if not lines.isascii():
        return False
    # What is left once every printable ASCII character is deleted (one C pass over bytes):
    # exactly the newlines, or a field holds something clean() would change.
    return len(lines.encode("ascii").translate(None, _PRINTABLE)) == count


_PRINTABLE = bytes(range(0x20, 0x7F))


def stamp(at: float | None) -> str | None:
    """*at* (epoch seconds) as local ``YYYY-MM-DD HH:MM:SS``; None when it is not a time."""
    if not isinstance(at, (int, float)) or not 0 < at < 1e11:
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def episode_note(state: State, rows: int, oldest: float | None) -> str | None:
    """In plain words, what the recovery episode a drain found (*state*, before the drain
    moved it) means for what it shows: *rows* rows, the oldest queued at *oldest*. None when
    it says nothing a reader needs (a delivered wake's own episode, rows queued under it)."""
    if not isinstance(state, tuple) or state[0] == "acked":
        return None
    status, kind, _generation = state
    if status == "announced":  # a watcher start found it: a check: rearm-resurface wake
        if rows:
            since = stamp(oldest)
            return ("RECOVERY: what is below waited while no watcher was running (or after a wake "
                    "that was not acknowledged), so nothing woke you for it"
                    + (f"; the oldest row was queued at {since}" if since else "")
                    + ". Handle it as usual: the acknowledgement also closes this recovery episode.")
        return ("RECOVERY: no watcher was running for a while; nothing was queued meanwhile, but "
                "the crew status and open decisions below were not seen yet. Look them over: the "
                "acknowledgement closes this recovery episode.")
    if rows:
        return None
    if kind == "handling":
        return ("NOTHING NEW: the wake that brought you here was already drained and acknowledged "
                "with an earlier one; acknowledge to close its episode.")
    return ("NOTHING QUEUED: the watcher stopped since your last acknowledgement (a handling "
            "turn may have been cut short) and nothing arrived meanwhile; acknowledge to close "
            "the recovery episode.")


def emit(out: TextIO, err: TextIO, rows: Sequence[tuple[Any, ...]], *, note: str | None,
         held: str | None, command: str | None, context: Sequence[str],
         kinds: Collection[str] | None = None) -> None:
    """Print a drain (see the module docstring): *rows* are the deduped
    ``(seq, kind, key, payload, ...)`` (*kinds* their kinds, when the caller knows them),
    *note* the episode's line, *held* the supervision branch's, *command* the acknowledgement
    owed (None: none), *context* the lines after the rows. Everything is written and flushed
    when it returns."""
    if note:
        out.write(note + "\n")
    # Built as they are written, one piece at a time (pieces says why).
    for piece in pieces(rows, kinds):
        out.write(piece)
    if held:
        out.write(held + "\n")
    elif not rows and command is None and not note:
        out.write(NOTHING + "\n")
    if context:
        out.write("".join([text + "\n" for text in context]))
    out.flush()
    required = ack_required(command)
    if required is not None:
        err.write(required + "\n")
        err.flush()


def ack_line(cutoff: int, consumed: int, retired: bool, remaining: int, state: State,
             suffix: str) -> str:
    """An acknowledgement's one-line confirmation: what it consumed, the episode's state and
    what is still queued."""
    rows = (f"{consumed} row{'' if consumed == 1 else 's'} consumed" if consumed
            else "no row left to consume (already acknowledged)" if cutoff else "no rows to consume")
    done = f"WAKE ACKNOWLEDGED through row {cutoff}: {rows}" if cutoff else f"WAKE ACKNOWLEDGED: {rows}"
    if isinstance(state, tuple):
        episode = (f"recovery episode {state[2]} closed" if retired or state[0] == "acked"
                   else f"recovery episode stays open ({':'.join(state)})")
    else:
        episode = "no recovery episode open"
    queue = ("nothing else is queued" if not remaining
             else f"{remaining} row{'' if remaining == 1 else 's'} still queued: run "
                  f"fm wake drain{suffix} to handle {'it' if remaining == 1 else 'them'}")
    return f"{done}; {episode}; {queue}."


def screen_lines(name: str, pane: str, text: str | None, error: str | None) -> list[str]:
    """Crew *name*'s screen as a drain shows it after its turn-end row: the last
    :data:`SCREEN_LINES` non-blank lines of *text* (its pane's capture), each sanitised and cut
    to :data:`SCREEN_CHARS` characters, under a header; one line saying why when it could not
    be read (*text* None, *error* the reason)."""
    where = f"{clean(name)} (pane {clean(pane)})"
    if text is None:
        return [f"SCREEN {where}: not read: {unread(error)}"]
    kept = tail(text)
    if not kept:
        return [f"SCREEN {where}: blank"]
    last = "its last non-blank line" if len(kept) == 1 else f"its last {len(kept)} non-blank lines"
    return [f"SCREEN {where}, {last} now (the turn ended before):", *[f"  | {one}" for one in kept]]


def unread(error: str | None) -> str:
    """Why a screen was not read, on one line (*error* as the backend said it)."""
    return " ".join(clean(error or "").split())[:SCREEN_CHARS] or "the backend could not read it"


def tail(text: str) -> list[str]:
    """The last :data:`SCREEN_LINES` lines of *text* that are not blank once sanitised, each
    cut to :data:`SCREEN_CHARS` characters."""
    kept: list[str] = []
    for raw in reversed(text.splitlines()):
        one = clean(raw).rstrip()
        if one.strip():
            kept.append(one[:SCREEN_CHARS])
            if len(kept) == SCREEN_LINES:
                break
    kept.reverse()
    return kept


def screens_omitted(count: int) -> str:
    """The line for turn-end screens past :data:`SCREENS_MAX`."""
    return (f"SCREENS: {count} more crew{'' if count == 1 else 's'} ended a turn; their screens "
            f"are not shown (at most {SCREENS_MAX} a drain)")


def answer_command(crew: str, key: str) -> str:
    """The command that answers decision *key* of *crew* (names and keys are shell-safe)."""
    return f'fm crew answer {crew} --key {key} "<answer>"'


def decisions(found: Iterable[tuple[str, str, str, float | None, bool]]) -> list[dict[str, object]]:
    """Open decisions (``(crew, key, note, at, keyed)``, :func:`firstmate.fast.crewlog.fold_decisions`)
    as ``fm wake drain --json`` gives them: crew, key, the question, the options it offers when
    they can be read from it, when it was asked, and the exact command that answers it."""
    out: list[dict[str, object]] = []
    for crew, key, note, at, keyed in found:
        question = " ".join(clean(note).split())
        out.append({"crew": crew, "key": key, "keyed": keyed, "question": question,
                    "options": options(question), "asked_at": at,
                    "answer_command": answer_command(crew, key)})
    return out


#: Words a clause asking a question opens with: "which db, postgres or sqlite" offers no
#: option named "which db".
_ASKING = frozenset(["which", "what", "whether", "should", "shall", "do", "does", "can",
                     "could", "would", "will", "may", "is", "are", "how", "who", "where", "when",
                     "why"])


def options(question: str) -> list[str]:
    """The choices *question* offers, when it spells them out: ``options: a, b, c`` (or
    ``choices:``), a bracketed list (``[a|b]``, ``(a/b)``), an enumeration (``(1) a (2) b``,
    ``a) x b) y``), or a short ``a or b?`` ending the question; else []."""
    text = question.strip()
    lowered = text.lower()
    for label in ("options:", "choices:", "option:", "choice:"):
        at = lowered.rfind(label)
        if at >= 0:
            found = _split(text[at + len(label):].strip().rstrip("?.").strip(), (",", "|", "/", " or "))
            if len(found) >= 2:
                return found
    for opening, closing in (("[", "]"), ("{", "}"), ("(", ")")):
        end = text.rfind(closing)
        start = text.rfind(opening, 0, end) if end > 0 else -1
        if start >= 0:
            found = _split(text[start + 1:end], ("|", "/"))
            if len(found) >= 2:
                return found
    found = _enumerated(text)
    if found:
        return found
    if text.endswith("?") and " or " in text:
        clause = text[:-1]
        for mark in (":", "?", ";", " - "):
            clause = clause.rpartition(mark)[2] if mark in clause else clause
        found = _split(clause.strip(), (",", " or "))
        if (len(found) >= 2 and all(len(one.split()) <= 4 for one in found)
                and found[0].split()[0].lower() not in _ASKING):
            return found
    return []


def _split(text: str, separators: Sequence[str]) -> list[str]:
    parts = [text]
    for sep in separators:
        parts = [piece for part in parts for piece in part.split(sep)]
    found = [part.strip().strip("'\"`").strip() for part in parts]
    if any(not part or len(part) > 80 for part in found):
        return []
    return found


def _enumerated(text: str) -> list[str]:
    """``(1) a (2) b`` / ``1) a 2) b`` / ``(a) x (b) y`` / ``a) x b) y``: the items, in order."""
    for marks in ("123456789", "abcdefghi"):
        cuts: list[tuple[int, int]] = []  # where each mark starts and where its item starts
        at = 0
        for number, mark in enumerate(marks):
            spellings = [f"({mark})", f" {mark})"] + ([f"{mark})"] if number == 0 else [])
            found = [(text.find(one, at), len(one)) for one in spellings]
            found = [(start, width) for start, width in found if start >= 0
                     and (number or start == 0 or one_word_before(text, start))]
            if not found:
                break
            start, width = min(found)
            cuts.append((start, start + width))
            at = start + width
        if len(cuts) >= 2:
            items = [text[begin:(cuts[i + 1][0] if i + 1 < len(cuts) else len(text))]
                     for i, (_start, begin) in enumerate(cuts)]
            items = [_bare(item) for item in items]
            if all(items) and all(len(item) <= 80 for item in items):
                return items
    return []


def _bare(item: str) -> str:
    """An enumerated item without the punctuation and the ``or`` / ``and`` joining the next."""
    item = item.strip().rstrip(",;?.").strip()
    for joint in (" or", " and"):
        item = item.removesuffix(joint)
    return item.rstrip(",;").strip()


def one_word_before(text: str, start: int) -> bool:
    """The first mark of an enumeration follows a space or a colon (not a word: ``a)`` inside
    ``data)`` is no mark)."""
    return text[start - 1] in " :" if start > 0 else True


__all__ = ["NOTHING", "ORDER", "PIECE_ROWS", "SCREENS_MAX", "SCREEN_CHARS", "SCREEN_LINES",
           "SECTIONS", "ack_line", "answer_command", "decisions", "emit", "episode_note",
           "explanations", "header", "line", "options", "pieces", "plain", "screen_lines",
           "screens_omitted", "sections", "stamp", "tail", "unread"]
