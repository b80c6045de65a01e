"""``fm top``'s frame as text: lines that fit a width (and a height, on a terminal).

A pure function of a :class:`~firstmate.app.top.Frame`; no escape codes (the screen adds
those). Text from the home (status lines, reasons, panes) is cleaned again here, since a log
written by hand may hold anything, and cut by display width (wide characters count two).
"""

from __future__ import annotations

import time
import unicodedata

from firstmate.app.top import CrewView, Frame, WakeView
from firstmate.base.envnum import finite

#: Narrowest layout rendered; a narrower screen gets lines cut at its edge.
MIN_WIDTH = 40
NAME_MAX = 20
PANE_MAX = 18
START_HINT = ("no firstmate home here yet; to start one:",
              "  fm crew add NAME --pane TARGET   register a crew",
              "  fm arm                           start the watcher",
              "  fm install <harness>             wire in a harness (its hooks arm the watcher)")


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


def _ago(frame: Frame, at: float | None) -> str:
    return "-" if at is None else age(frame.now - at)


def _watcher_line(frame: Frame) -> str:
    w = frame.watcher
    beacon = "no beacon" if w.beacon_at is None else f"beacon {_ago(frame, w.beacon_at)} ago"
    if w.state == "healthy":
        return f"watcher  healthy  pid {w.pid}  {beacon}"
    if w.state == "stale-beacon":
        return (f"watcher  STALE  pid {w.pid}  {beacon} (grace {age(w.grace)}); "
                "fm arm --take-over replaces it")
    if w.state == "unverified":
        pid = "" if w.pid is None else f"  pid {w.pid}"
        return f"watcher  unverified{pid}  {beacon} (starting, closing or not ours)"
    return "watcher  none  (fm arm starts one, or the harness hook does)"


def _header(frame: Frame) -> list[str]:
    clock = time.strftime("%H:%M:%S", time.localtime(frame.now))
    lines = [f"fm top  {clock}  {clean(frame.home)}"]
    if frame.problem is not None:
        return [*lines, f"problem  {clean(frame.problem)}"]
    if not frame.exists:
        return [*lines, *START_HINT]
    oldest = ""
    if frame.oldest_seq is not None:
        oldest = f"  oldest #{frame.oldest_seq}, {_ago(frame, frame.oldest_at)} old"
    rows = "row" if frame.depth == 1 else "rows"
    lines += [
        _watcher_line(frame),
        f"queue    {frame.depth} {rows}{oldest}",
        f"episode  {clean(frame.episode or 'none')}",
        f"away     {'on' if frame.away else 'off'}",
    ]
    return lines


def _crew_lines(frame: Frame, width: int) -> list[str]:
    crews = frame.crews
    name_w = min(NAME_MAX, max([4, *(width_of(clean(c.name)) for c in crews)]))
    pane_w = min(PANE_MAX, max([4, *(width_of(clean(_pane(c))) for c in crews)]))
    head = f"  {pad('crew', name_w)}  {pad('pane', pane_w)}  {'status':>6}  {'turn':>6}  last status"
    lines = [f"crews ({len(crews)})", head]
    for c in crews:
        lines.append(_crew_line(frame, c, name_w, pane_w, width))
    if not crews:
        lines.append("  (none registered: fm crew add NAME --pane TARGET)")
    return lines


def _pane(c: CrewView) -> str:
    """The crew's pane, and ``gone`` or ``dead`` when tmux says so."""
    return f"{c.pane} {c.pane_state}" if c.pane_state in ("gone", "dead") else c.pane


def _crew_line(frame: Frame, c: CrewView, name_w: int, pane_w: int, width: int) -> str:
    lead = (f"  {pad(clean(c.name), name_w)}  {pad(clean(_pane(c)), pane_w)}  "
            f"{_ago(frame, c.status_at):>6}  {_ago(frame, c.turn_ended_at):>6}  ")
    text = f"(unreadable: {clean(c.problem)})" if c.problem else clean(c.status) or "-"
    return lead + cut(text, max(1, width - width_of(lead)))


def _wake_lines(frame: Frame, width: int, shown: int | None = None) -> list[str]:
    wakes = frame.wakes if shown is None else frame.wakes[:shown]
    count = f"{len(wakes)}" if len(wakes) == len(frame.wakes) else f"{len(wakes)} of {len(frame.wakes)}"
    lines = [f"last wakes ({count})", f"  {'ago':>6}  {'event':>7}  {'append':>7}  reason"]
    for w in wakes:
        lines.append(_wake_line(frame, w, width))
    if not frame.wakes:
        lines.append("  (none delivered yet)")
    return lines


def _wake_line(frame: Frame, w: WakeView, width: int) -> str:
    lead = (f"  {_ago(frame, w.at):>6}  {latency(w.event_latency):>7}  "
            f"{latency(w.append_latency):>7}  ")
    return lead + cut(clean(w.reason), max(1, width - width_of(lead)))


def render(frame: Frame, width: int = 100, height: int | None = None,
           footer: str | None = None) -> list[str]:
    """The frame as lines of at most *width* columns (laid out for at least :data:`MIN_WIDTH`);
    with *height*, at most that many lines: older wakes are left out first (down to the newest),
    then crews beyond the room left are counted on one line, never silently dropped."""
    screen = max(1, width)
    width = max(MIN_WIDTH, width)
    top = _header(frame)
    if frame.problem is not None or not frame.exists:
        body: list[str] = []
        crews: list[str] = []
    else:
        crews = _crew_lines(frame, width)
        body = _wake_lines(frame, width)
    tail = [] if footer is None else ["", footer]
    if height is not None and crews:
        room = height - len(top) - 1 - len(crews) - 1 - len(body) - len(tail)
        if room < 0 and len(frame.wakes) > 1:
            # The newest wake stays; the older ones give up their lines before any crew does.
            shown = max(1, len(frame.wakes) + room)
            room += len(frame.wakes) - shown
            body = _wake_lines(frame, width, shown)
        if room < 0:
            keep = max(0, len(crews) - 2 + room - 1)  # rows kept; one line says how many more
            hidden = len(crews) - 2 - keep
            if hidden > 0:
                crews = [*crews[: 2 + keep], f"  … and {hidden} more crew(s)"]
    lines = [*top]
    if crews:
        lines += ["", *crews]
    if body:
        lines += ["", *body]
    lines += tail
    lines = [cut(line, screen) for line in lines]
    return lines if height is None else lines[: max(1, height)]


__all__ = ["MIN_WIDTH", "START_HINT", "age", "clean", "cut", "latency", "render", "width_of"]
