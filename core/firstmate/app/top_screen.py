"""``fm top``'s two ways of showing frames: a redrawn screen on a terminal, appended text elsewhere.

Both poll :meth:`~firstmate.app.top.Gatherer.fingerprint` every :data:`TICK` seconds (the
reason it is a poll and not the doorbell is in :mod:`firstmate.app.top`) and gather a frame
when it changes, and at least every *interval* seconds (ages move; a watcher's beacon goes stale
with nothing written).

* :func:`run_screen` (stdout is a terminal): the alternate screen, redrawn in place with plain
  ANSI (in colour unless ``NO_COLOR`` is set); keys are read in cbreak mode without echo and
  handled by a :class:`~firstmate.app.top_panel.Panel` (select a crew, attach, peek, steer,
  answer, stop; ``q`` quits). The terminal is restored on every way out: ``q``, Ctrl-C, HUP or
  TERM, an exception, and around a Ctrl-Z suspension or an attach to a crew's pane.
* :func:`run_plain` (a pipe, a file): a frame is printed only when the home's state changed (its
  :meth:`~firstmate.app.top.Frame.steady` part), frames separated by a blank line, no escapes.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable
from typing import IO, Any

from firstmate.app.crewlook import Attach
from firstmate.app.top import Frame, Gatherer
from firstmate.app.top_keys import KeyReader
from firstmate.app.top_panel import QUIT, REDRAW, Panel
from firstmate.app.top_view import render
from firstmate.base import stopsignals
from firstmate.base.exitcodes import ExitCode

#: Seconds between two looks at the fingerprint (the most a change waits to be drawn).
TICK = 0.1
DEFAULT_INTERVAL = 1.0

ENTER = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J"  # alternate screen, hide the cursor, clear
LEAVE = "\x1b[?25h\x1b[?1049l"  # show the cursor, back to the normal screen
HOME_CURSOR = "\x1b[H"
CLEAR_EOL = "\x1b[K"
CLEAR_EOS = "\x1b[J"


def _stopped_status(stop: stopsignals.Stopped) -> int:
    return 128 + stop.signum


def run_plain(gatherer: Gatherer, out: IO[str], *, interval: float = DEFAULT_INTERVAL,
              width: Callable[[], int] = lambda: 100, tick: float = TICK) -> int:
    """Print a frame now and another whenever the home's state changes, until stopped."""
    last_steady: Frame | None = None
    last_print: tuple[object, ...] | None = None
    due = 0.0
    try:
        with stopsignals.trapped():
            while True:
                fp = gatherer.fingerprint()
                now = time.monotonic()
                if fp != last_print or now >= due:
                    last_print, due = fp, now + interval
                    frame = gatherer.frame()
                    steady = frame.steady()
                    if steady != last_steady:
                        text = "\n".join(render(frame, width()))
                        out.write(("" if last_steady is None else "\n") + text + "\n")
                        out.flush()
                        last_steady = steady
                time.sleep(tick)  # the poll's period: nothing to wait on (see module docstring)
    except stopsignals.Stopped as stop:
        return _stopped_status(stop)
    finally:
        gatherer.close()


class _Terminal:
    """The terminal's modes while the screen is up: entered once, restored exactly once."""

    def __init__(self, out_fd: int, in_fd: int | None) -> None:
        self.out_fd = out_fd
        self.in_fd = in_fd
        self.saved: list[Any] | None = None
        self.active = False

    def _write(self, text: str) -> None:
        # os.write, not the text stream: this also runs from a signal handler.
        data = text.encode()
        with contextlib.suppress(OSError):
            while data:
                data = data[os.write(self.out_fd, data):]

    def enter(self) -> None:
        import termios
        import tty

        if self.in_fd is not None:
            try:
                self.saved = termios.tcgetattr(self.in_fd)
                tty.setcbreak(self.in_fd, termios.TCSANOW)  # no echo, keys at once, ^C still INT
            except termios.error:
                self.in_fd = None
        self.active = True
        self._write(ENTER)

    def leave(self) -> None:
        if not self.active:
            return
        import termios

        self.active = False
        self._write(LEAVE)
        if self.in_fd is not None and self.saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(self.in_fd, termios.TCSADRAIN, self.saved)

    def draw(self, lines: list[str]) -> None:
        self._write(HOME_CURSOR + f"{CLEAR_EOL}\n".join(lines) + CLEAR_EOL + CLEAR_EOS)

    def size(self) -> tuple[int, int]:
        try:
            got = os.get_terminal_size(self.out_fd)
        except OSError:
            return (80, 24)
        return (got.columns or 80, got.lines or 24)


def run_screen(gatherer: Gatherer, out_fd: int, in_fd: int | None, *,
               interval: float = DEFAULT_INTERVAL, tick: float = TICK,
               panel: Panel | None = None, colour: bool = False) -> int:
    """Redraw the frame in place until ``q`` (exit 0) or a stop signal (128 + its number)."""
    term = _Terminal(out_fd, in_fd)
    panel = panel or Panel(str(gatherer.root), dict(gatherer.env))
    state: dict[str, object] = {"force": True}

    def suspend(signum: int, frame: object) -> None:
        # Ctrl-Z: hand the terminal back as it was, stop, and take it again when continued.
        term.leave()
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)
        signal.signal(signal.SIGTSTP, suspend)
        term.enter()
        state["force"] = True

    previous = signal.getsignal(signal.SIGTSTP)
    try:
        with stopsignals.trapped():
            signal.signal(signal.SIGTSTP, suspend)
            term.enter()
            return _screen_loop(gatherer, term, state, interval, tick, panel, colour)
    except stopsignals.Stopped as stop:
        return _stopped_status(stop)
    finally:
        with contextlib.suppress(ValueError, TypeError):
            signal.signal(signal.SIGTSTP, previous or signal.SIG_DFL)
        term.leave()
        gatherer.close()


def _attach(term: _Terminal, plan: Attach, panel: Panel) -> None:
    """Run a tmux client for *plan* in this terminal, given back as it was, until it detaches."""
    import subprocess

    term.leave()
    try:
        code = subprocess.run(plan.argv, env=dict(plan.env), check=False).returncode
        panel.attached(plan, code)
    except OSError as exc:
        panel.attached(plan, None, exc.strerror or str(exc))
    finally:
        term.enter()


def _keys(term: _Terminal, reader: KeyReader, tick: float) -> list[str]:
    """The keys typed within *tick* seconds (none without a keyboard)."""
    if term.in_fd is None:
        time.sleep(tick)  # no keyboard: the poll's period (see the module docstring)
        return []
    ready, _, _ = select.select([term.in_fd], [], [], tick)
    if not ready:
        return []
    try:
        data = os.read(term.in_fd, 64)
    except OSError:
        data = b""
    if not data:
        term.in_fd = None  # the terminal's input is gone: quit with a signal only
    return reader.keys(data)


def _screen_loop(gatherer: Gatherer, term: _Terminal, state: dict[str, object],
                 interval: float, tick: float, panel: Panel, colour: bool) -> int:
    last_fp: tuple[object, ...] | None = None
    last_size: tuple[int, int] | None = None
    last_lines: list[str] | None = None
    frame: Frame | None = None
    reader = KeyReader()
    due = 0.0
    while True:
        typed = _keys(term, reader, tick)
        for key in typed:
            done = panel.handle(key, frame)
            if done == QUIT:
                return ExitCode.OK
            if done == REDRAW:
                state["force"] = True
            elif isinstance(done, Attach):
                _attach(term, done, panel)
                state["force"] = True
        fp = gatherer.fingerprint()
        size = term.size()
        now = time.monotonic()
        regather = fp != last_fp or size != last_size or now >= due or frame is None
        if not (regather or typed or state["force"] or panel.due(now)):
            continue
        if state["force"]:
            last_lines = None
            state["force"] = False
        if regather or frame is None:
            last_fp, last_size, due = fp, size, now + interval
            frame = gatherer.frame()
        columns, rows = size
        # One column spare: a full last column leaves the cursor in a pending wrap, where
        # clearing to the end of the line would erase that column's character.
        lines = panel.lines(frame, columns - 1, rows, colour)
        if lines != last_lines:
            term.draw(lines)
            last_lines = lines


__all__ = ["DEFAULT_INTERVAL", "TICK", "run_plain", "run_screen"]
