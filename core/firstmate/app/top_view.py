"""``fm top``'s frame as text: lines that fit a width (and a height, on a terminal).

A pure function of a :class:`~firstmate.app.top.Frame`. Text from the home (status lines,
reasons, panes) is cleaned again here, since a log written by hand may hold anything, and cut by
display width (wide characters count two). Lines are built from styled pieces and cut before
any escape code is added, so a coloured line is exactly as wide as the plain one: with
*colour* (a terminal, ``NO_COLOR`` unset) a status line's verb sets its colour (``failed:`` and
``blocked:`` bold red, ``needs-decision:`` yellow, ``done:`` green), a pane that is ``dead`` or
``gone`` is red, and the selected crew's row is shown in reverse video; without it, no escape
code at all.

The crews come first, after the title line: under a short window older wakes give way first
(down to the newest), then the crews' rows scroll, keeping the selected one in view, and the
rows left out are counted above and below.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Sequence

from firstmate.app.top import CrewView, Frame, WakeView
from firstmate.base.envnum import finite

#: Narrowest layout rendered; a narrower screen gets lines cut at its edge.
MIN_WIDTH = 40
#: From this width on, the crews' pane ids get a column of their own.
WIDE = 100
NAME_MAX = 20
NAME_MAX_NARROW = 14
HARNESS_MAX = 10
PANE_MAX = 12
START_HINT = ("no firstmate home here yet; to start one:",
              "  fm install <harness>             wire in a harness (it starts the watcher)",
              "  fm crew add NAME --pane TARGET   register a crew",
              "  then start the harness in the project")

#: A piece of a line and its SGR parameters ("" for none).
Seg = tuple[str, str]
BOLD, DIM, REVERSE = "1", "2", "7"
RED, GREEN, YELLOW = "31", "32", "33"
ALERT = "1;31"
#: Styles of the verbs that matter to the captain; other verbs are plain.
VERB_STYLES = {"failed": ALERT, "blocked": ALERT, "needs-decision": "1;33", "done": GREEN}
STATE_STYLES = {"dead": RED, "gone": RED, "unknown": YELLOW, "unreachable": YELLOW, "live": GREEN}
_VERB = re.compile(r"\s*([A-Za-z][A-Za-z0-9_-]*):")
_SIGNAL_VERB = re.compile(r"signal: \S+?\.status: ([A-Za-z][A-Za-z0-9_-]*):")


def age(seconds: float | None) -> str:
    """``3s``, ``4m12s``, ``2h05m``, ``3d04h``; ``-`` for unknown (or not a finite number)."""
    if seconds is None or not finite(seconds):
        return "-"
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def latency(seconds: float | None) -> str:
    """``85ms``, ``2.1s``, then as :func:`age`; ``-`` for unknown (or not a finite number)."""
    if seconds is None or not finite(seconds):
        return "-"
    if seconds < 1.0:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60.0:
        return f"{seconds:.1f}s"
    return age(seconds)


def clean(text: str) -> str:
    """One printable line (escape sequences and controls dropped)."""
    from firstmate.base.wakeinput import clean as clean_input

    return " ".join(clean_input(text).split())


def _char_width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def width_of(text: str) -> int:
    return sum(_char_width(ch) for ch in text)


def cut(text: str, width: int) -> str:
    """*text* in at most *width* columns; a cut ends with ``…``."""
    if width <= 0:
        return ""
    if width_of(text) <= width:
        return text
    out: list[str] = []
    used = 0
    for ch in text:
        w = _char_width(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def pad(text: str, width: int) -> str:
    text = cut(text, width)
    return text + " " * max(0, width - width_of(text))


def verb_style(text: str) -> str:
    """The style of a status line (or a reason carrying one) by its verb."""
    found = _SIGNAL_VERB.match(text) or _VERB.match(text)
    return VERB_STYLES.get(found.group(1).lower(), "") if found else ""


# --- styled lines ------------------------------------------------------------------------------


def fit(line: Sequence[Seg], width: int) -> list[Seg]:
    """*line* in at most *width* columns, cut (with ``…``) where the plain text would be."""
    if width_of("".join(text for text, _ in line)) <= width:
        return list(line)
    if width <= 0:
        return []
    out: list[Seg] = []
    used = 0
    for text, style in line:
        part: list[str] = []
        for ch in text:
            if used + _char_width(ch) > width - 1:  # (one column for the …)
                break
            part.append(ch)
            used += _char_width(ch)
        else:
            out.append((text, style))
            continue
        if part:
            out.append(("".join(part), style))
        break
    return [*out, ("…", out[-1][1] if out else "")]


def paint(line: Sequence[Seg], colour: bool, base: str = "", fill: int = 0) -> str:
    """*line* as text: with *colour*, each piece in its style on top of *base* (the whole line,
    padded to *fill* columns); without, plain."""
    plain = "".join(text for text, _ in line)
    pad_to = " " * max(0, fill - width_of(plain)) if base else ""
    if not colour:
        return plain
    out = []
    for text, style in [*line, (pad_to, "")]:
        codes = ";".join(code for code in (base, style) if code)
        out.append(f"\x1b[{codes}m{text}\x1b[0m" if codes and text else text)
    return "".join(out)


# --- the frame ---------------------------------------------------------------------------------


def _ago(frame: Frame, at: float | None) -> str:
    return "-" if at is None else age(frame.now - at)


def _watcher_line(frame: Frame) -> list[Seg]:
    w = frame.watcher
    beacon = "no beacon" if w.beacon_at is None else f"beacon {_ago(frame, w.beacon_at)} ago"
    if w.state == "healthy":
        return [("watcher  ", ""), ("healthy", GREEN), (f"  pid {w.pid}  {beacon}", "")]
    if w.state == "stale-beacon":
        return [("watcher  ", ""), ("STALE", ALERT),
                (f"  pid {w.pid}  {beacon} (grace {age(w.grace)}); the harness replaces it, "
                 "or end it now: fm arm --stop", "")]
    if w.state == "unverified":
        pid = "" if w.pid is None else f"  pid {w.pid}"
        return [("watcher  ", ""), ("unverified", YELLOW),
                (f"{pid}  {beacon} (starting, closing or not ours)", "")]
    return [("watcher  ", ""), ("none", YELLOW),
            (f"  ({frame.restart or 'the harness starts one'})", "")]


def _title(frame: Frame) -> list[list[Seg]]:
    clock = time.strftime("%H:%M:%S", time.localtime(frame.now))
    lines: list[list[Seg]] = [[("fm top", BOLD), (f"  {clock}  {clean(frame.home)}", "")]]
    if frame.problem is not None:
        return [*lines, [("problem  ", ALERT), (clean(frame.problem), "")]]
    if not frame.exists:
        return [*lines, *([(hint, "")] for hint in START_HINT)]
    return lines


def _state_lines(frame: Frame) -> list[list[Seg]]:
    oldest = ""
    if frame.oldest_seq is not None:
        oldest = f"  oldest #{frame.oldest_seq}, {_ago(frame, frame.oldest_at)} old"
    rows = "row" if frame.depth == 1 else "rows"
    return [_watcher_line(frame),
            [(f"queue    {frame.depth} {rows}{oldest}", "")],
            [(f"episode  {clean(frame.episode or 'none')}", "")],
            [("away     ", ""), ("on", YELLOW) if frame.away else ("off", "")]]


class _Columns:
    """The crews' column widths for one frame and width."""

    def __init__(self, frame: Frame, width: int) -> None:
        crews = frame.crews
        most = NAME_MAX if width >= WIDE else NAME_MAX_NARROW
        self.name = min(most, max([4, *(width_of(clean(c.name)) for c in crews)]))
        self.harness = min(HARNESS_MAX, max([7, *(width_of(clean(c.harness or "-"))
                                                  for c in crews)]))
        self.pane = (min(PANE_MAX, max([4, *(width_of(clean(c.pane)) for c in crews)]))
                     if width >= WIDE else 0)
        self.state = max([5, *(len(c.pane_state or "-") for c in crews)])
        self.width = width

    def header(self) -> list[Seg]:
        pane = f"{pad('pane', self.pane)}  " if self.pane else ""
        return [(f"  {pad('crew', self.name)}  {pad('harness', self.harness)}  {pane}"
                 f"{pad('state', self.state)}  dec  {'turn end':>8}  {'age':>6}  last status",
                 DIM)]

    def row(self, frame: Frame, c: CrewView, selected: bool) -> list[Seg]:
        state = c.pane_state or "-"
        dec = f"!{min(99, len(c.decisions))}" if c.decisions else ""
        line: list[Seg] = [(f"{'>' if selected else ' '} {pad(clean(c.name), self.name)}  "
                            f"{pad(clean(c.harness or '-'), self.harness)}  ", "")]
        if self.pane:
            line.append((f"{pad(clean(c.pane), self.pane)}  ", ""))
        line += [(pad(state, self.state), STATE_STYLES.get(state, "")), ("  ", ""),
                 (dec, "1;33"), (" " * (3 - len(dec)), ""),
                 (f"  {_ago(frame, c.turn_ended_at):>8}  {_ago(frame, c.status_at):>6}  ", "")]
        if c.problem:
            line.append((f"(unreadable: {clean(c.problem)})", ALERT))
        else:
            text = clean(c.status) or "-"
            line.append((text, verb_style(text)))
        return line


def _window(count: int, room: int, selected: int | None) -> tuple[int, int]:
    """The rows ``[start, end)`` of *count* shown in *room* lines, the selected one among them,
    leaving a line for each "more" count above and below."""
    if count <= room:
        return 0, count
    at = 0 if selected is None else selected
    if room <= 2:
        return at, at + 1
    if at < room - 1:
        return 0, room - 1
    if at >= count - (room - 1):
        return count - (room - 1), count
    shown = room - 2
    start = min(max(0, at - shown // 2), count - shown)
    return start, start + shown


def _crew_block(frame: Frame, width: int, selected: str | None,
                room: int | None) -> list[tuple[list[Seg], str]]:
    crews = frame.crews
    columns = _Columns(frame, width)
    lines: list[tuple[list[Seg], str]] = [([(f"crews ({len(crews)})", BOLD)], ""),
                                          (columns.header(), "")]
    if not crews:
        return [*lines, ([("  (none: fm crew spawn NAME --harness H, or fm crew add NAME --pane "
                           "TARGET)", "")], "")]
    names = [c.name for c in crews]
    at = names.index(selected) if selected in names else None
    start, end = _window(len(crews), len(crews) if room is None else room, at)
    if start:
        lines.append(([(f"  … {start} more above", DIM)], ""))
    for index in range(start, end):
        chosen = index == at
        lines.append((columns.row(frame, crews[index], chosen), REVERSE if chosen else ""))
    if end < len(crews):
        lines.append(([(f"  … and {len(crews) - end} more crew(s)", DIM)], ""))
    return lines


def _wake_block(frame: Frame, shown: int | None = None) -> list[list[Seg]]:
    wakes = frame.wakes if shown is None else frame.wakes[:shown]
    count = f"{len(wakes)}" if len(wakes) == len(frame.wakes) else f"{len(wakes)} of {len(frame.wakes)}"
    lines = [[(f"last wakes ({count})", BOLD)],
             [(f"  {'ago':>6}  {'event':>7}  {'append':>7}  reason", DIM)]]
    lines += [_wake_line(frame, w) for w in wakes]
    if not frame.wakes:
        lines.append([("  (none delivered yet)", "")])
    return lines


def _wake_line(frame: Frame, w: WakeView) -> list[Seg]:
    lead = (f"  {_ago(frame, w.at):>6}  {latency(w.event_latency):>7}  "
            f"{latency(w.append_latency):>7}  ")
    reason = clean(w.reason)
    return [(lead, ""), (reason, verb_style(reason))]


Footer = str | Seg


def render(frame: Frame, width: int = 100, height: int | None = None,
           footer: str | Sequence[Footer] | None = None, *, selected: str | None = None,
           colour: bool = False) -> list[str]:
    """The frame as lines of at most *width* columns (laid out for at least :data:`MIN_WIDTH`);
    with *height*, at most that many lines: older wakes are left out first (down to the newest),
    then the crews' rows scroll (the *selected* crew's kept in view), the rows left out counted
    on a line above and below. *footer* lines (text, or ``(text, style)``) end the frame."""
    screen = max(1, width)
    width = max(MIN_WIDTH, width)
    top = _title(frame)
    tail: list[list[Seg]] = []
    if footer is not None:
        items = [footer] if isinstance(footer, str) else list(footer)
        tail = [[]] + [[(item, "")] if isinstance(item, str) else [item] for item in items]
    if frame.problem is not None or not frame.exists:
        state: list[list[Seg]] = []
        crews: list[tuple[list[Seg], str]] = []
        wakes: list[list[Seg]] = []
    else:
        state = _state_lines(frame)
        wakes = _wake_block(frame)
        crews = _crew_block(frame, width, selected, None)
    if height is not None and crews:
        fixed = len(top) + 1 + 2 + 1 + len(state) + 1 + len(tail)
        room = height - fixed - len(wakes) - max(1, len(frame.crews))
        if room < 0 and len(frame.wakes) > 1:
            # The newest wake stays; the older ones give up their lines before any crew does.
            shown = max(1, len(frame.wakes) + room)
            wakes = _wake_block(frame, shown)
        rows = height - fixed - len(wakes)
        if rows < len(frame.crews):
            crews = _crew_block(frame, width, selected, max(1, rows))
    lines: list[tuple[list[Seg], str]] = [(line, "") for line in top]
    if crews:
        lines += [([], ""), *crews]
    if state:
        lines += [([], ""), *((line, "") for line in state)]
    if wakes:
        lines += [([], ""), *((line, "") for line in wakes)]
    lines += [(line, "") for line in tail]
    out = [paint(fit(line, screen), colour, base, screen if base else 0) for line, base in lines]
    if height is None or len(out) <= height:
        return out
    # Too short even so: the footer (the prompt, the keys) stays; the lines above it are cut.
    keep = len(tail) if 0 < len(tail) < height else 0
    return out[: max(1, height) - keep] + (out[-keep:] if keep else [])


__all__ = ["MIN_WIDTH", "START_HINT", "VERB_STYLES", "age", "clean", "cut", "fit", "latency",
           "paint", "render", "verb_style", "width_of"]
