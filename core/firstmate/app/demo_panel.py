"""The live panel ``fm demo`` redraws on a terminal: crews, watcher, queue, episode, last wakes.

Plain ANSI (cursor home, clear to end of line / screen), no curses: the panel is redrawn in
place about four times a second by :class:`LivePanel`. :func:`render_panel` is a pure function
of a :class:`Snapshot`, so the layout is testable without a terminal. :func:`sample` reads the
demo home in-process (the watcher's lock and beacon, the queue, the crews' status logs and
panes); it never writes.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

import attrs

CLEAR_SCREEN = "\x1b[2J"
HOME_CURSOR = "\x1b[H"
CLEAR_EOL = "\x1b[K"
CLEAR_EOS = "\x1b[J"
HIDE_CURSOR = "\x1b[?25l"
SHOW_CURSOR = "\x1b[?25h"
REFRESH_S = 0.25
LAST_WAKES = 5
LAST_EVENTS = 6


def wants_live_view(out: IO[str], env: Mapping[str, str]) -> bool:
    """Redraw a panel only for a real terminal that understands cursor movement."""
    try:
        tty = out.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and env.get("TERM", "") not in ("", "dumb")


@attrs.frozen
class CrewRow:
    name: str
    status: str
    #: ``busy``, ``idle``, ``stale`` or ``-`` (pane not readable: no tmux, or gone).
    pane: str


@attrs.frozen
class WakeRow:
    reason: str
    event_ms: float | None
    append_ms: float | None


@attrs.frozen
class Snapshot:
    elapsed: float
    crews: tuple[CrewRow, ...] = ()
    watcher_pid: int | None = None
    watcher_state: str = "none"
    beacon_age: float | None = None
    queue_depth: int | None = None
    episode: str | None = None
    wakes: tuple[WakeRow, ...] = ()
    events: tuple[str, ...] = ()
    home: str = ""


def _cut(text: str, width: int) -> str:
    text = text.replace("\t", " ").replace("\n", " ")
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def render_panel(snap: Snapshot, width: int = 100) -> str:
    """The panel as text lines (no escape codes), each at most ``width`` characters."""
    width = max(40, width)
    age = "-" if snap.beacon_age is None else f"{snap.beacon_age:.1f}s"
    lines = [
        f"firstmate demo  {snap.elapsed:5.1f}s" + (f"  home {snap.home}" if snap.home else ""),
        "",
        f"watcher  pid {snap.watcher_pid or '-'} ({snap.watcher_state})  beacon age {age}",
        f"queue    depth {'-' if snap.queue_depth is None else snap.queue_depth}"
        f"   episode {snap.episode or 'none'}",
        "",
        "crews",
    ]
    name_w = max([5, *(len(c.name) for c in snap.crews)])
    for crew in snap.crews:
        lines.append(f"  {crew.name:<{name_w}}  {crew.pane:<5}  {crew.status or '-'}")
    if not snap.crews:
        lines.append("  (none yet)")
    lines += ["", f"last {LAST_WAKES} wakes (event → reason / append → reason)"]
    for wake in snap.wakes[-LAST_WAKES:]:
        lines.append(f"  {_ms(wake.event_ms):>8} / {_ms(wake.append_ms):>8}  {wake.reason}")
    if not snap.wakes:
        lines.append("  (none yet)")
    lines += ["", "events"]
    lines += [f"  {event}" for event in snap.events[-LAST_EVENTS:]]
    return "\n".join(_cut(line, width) for line in lines)


def frame(snap: Snapshot, width: int) -> str:
    """One redraw: cursor home, every line cleared to its end, then the rest of the screen."""
    body = render_panel(snap, width).split("\n")
    return HOME_CURSOR + "".join(f"{line}{CLEAR_EOL}\n" for line in body) + CLEAR_EOS


def _pane_state(home_root: Path, name: str, content: str | None, busy: bool, quiet: float,
                now: float) -> str:
    from firstmate.store import crew as crewmod
    from firstmate.watch.sources.stale import PaneState, pane_digest

    if content is None:
        return "-"
    if busy:
        return "busy"
    from firstmate.store.home import Home

    state = PaneState.decode(crewmod.read_text(crewmod.path(Home(home_root), name,
                                                            crewmod.PANE_STATE)))
    # The same rule as the stale source: unchanged for the quiet period and not busy.
    if state is not None and state.digest == pane_digest(content) and now - state.since >= quiet:
        return "stale"
    return "idle"


def sample(home_root: Path, env: Mapping[str, str], elapsed: float,
           wakes: Sequence[WakeRow], events: Sequence[str]) -> Snapshot:
    """Read the demo home as it is now; a part that cannot be read shows as ``-``."""
    from firstmate.base.envnum import env_float
    from firstmate.store import crew as crewmod
    from firstmate.store import health, queuestatus
    from firstmate.store.database import Store
    from firstmate.store.home import Home
    from firstmate.watch.backends.tmux import TmuxBackend

    home = Home(home_root)
    now = time.time()
    snap = Snapshot(elapsed, wakes=tuple(wakes), events=tuple(events), home=str(home_root))
    with contextlib.suppress(Exception):  # a half-written home mid-demo is not an error
        watcher = health.watcher_health(home, env)
        snap = attrs.evolve(snap, watcher_pid=watcher.pid, watcher_state=watcher.state,
                            beacon_age=watcher.beacon_age)
    if home.db.exists():
        store = Store(home)
        try:
            status = queuestatus.query(store).to_json()
            depth, episode = status.get("depth"), status.get("episode")
            snap = attrs.evolve(snap, queue_depth=depth if isinstance(depth, int) else None,
                                episode=episode if isinstance(episode, str) else None)
        except Exception:  # (the panel shows "-", the demo goes on)
            pass
        finally:
            store.close()
    rows: list[CrewRow] = []
    with contextlib.suppress(Exception):
        backend = TmuxBackend.from_env(env)
        quiet = env_float(env, "FM_POLL", 15.0)
        for member in crewmod.list(home):
            last = crewmod.last_line(home, member.name)
            content = None if member.pane.startswith("none:") else backend.capture(member.pane)
            busy = content is not None and backend.busy_in(content)
            rows.append(CrewRow(member.name, last.text if last is not None else "",
                                _pane_state(home_root, member.name, content, busy, quiet, now)))
    return attrs.evolve(snap, crews=tuple(rows))


@attrs.define(eq=False)
class LivePanel:
    """Redraws the panel from ``take()`` snapshots on a background thread until ``stop()``."""

    out: IO[str]
    take: Callable[[], Snapshot]
    width: Callable[[], int]
    interval: float = REFRESH_S
    errors: list[str] = attrs.Factory(list)
    _stop: threading.Event = attrs.Factory(threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self.out.write(HIDE_CURSOR + CLEAR_SCREEN)
        self.out.flush()
        self._thread = threading.Thread(target=self._run, name="fm-demo-panel", daemon=True)
        self._thread.start()

    def draw(self) -> None:
        try:
            self.out.write(frame(self.take(), self.width()))
            self.out.flush()
        except Exception as exc:  # (the panel must never take the demo down)
            if not self.errors:
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.draw()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.draw()  # the final state stays on screen above the summary
        self.out.write(SHOW_CURSOR)
        self.out.flush()
