"""Stop signals, handled one way by every long-running command (arm, watcher, host, checkpoint,
bridge, and the harness hooks and servers that park).

A stop (HUP, INT or TERM) must always end a command through its cleanup, with its one closing
line, whenever it lands. The same three races were repaired in several commands before they
shared this module; the rules now live here:

* **Before the handlers exist** — the first thing a command does (:func:`early`, from
  ``firstmate.cli.main``) is install handlers that write its closing line and exit: nothing
  needs cleaning up yet.
* **While they go in** — :func:`block` holds stops while the handlers are installed and the
  process tree is set up (so a stop never orphans a child); they are released inside the ``try``
  that handles what the handler raises (:func:`install` with ``unblock=False``, then
  :func:`unblock`), so a stop pending since the spawn is handled there.
* **During cleanup** — the handler blocks further stops before it raises: one stop is enough,
  and a second can never interrupt the cleanup of the first.

:func:`trapped` packages the last two for the common case. Only ``os`` and ``signal`` are
imported: the hot paths pay nothing for this module.
"""

from __future__ import annotations

import os
import signal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import FrameType

    Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None

STOP_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)
#: Names for the closing lines (no enum lookup needed).
NAMES = {1: "SIGHUP", 2: "SIGINT", 15: "SIGTERM"}


class Stopped(BaseException):
    """Raised in the main thread by a HUP/TERM/INT handler; carries the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def block() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def unblock() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def raise_stopped(signum: int, frame: FrameType | None) -> None:
    # One stop is enough: hold the others pending so the cleanup itself runs uninterrupted.
    block()
    raise Stopped(signum)


def install(handler: Callable[[int, FrameType | None], None] = raise_stopped, *,
            unblock_now: bool = True) -> dict[int, Handler]:
    """Route HUP/TERM/INT to *handler* (and unblock them: a mask inherited from a parent that
    held them while it spawned us must not silence our cleanup). Returns the old handlers.

    With *unblock_now* False the caller unblocks them itself, inside the ``try`` that handles
    what *handler* raises: a signal already pending runs the handler the moment the mask drops.
    """
    previous: dict[int, Handler] = {}
    for sig in STOP_SIGNALS:
        previous[int(sig)] = signal.signal(sig, handler)
    if unblock_now:
        unblock()
    return previous


class held:  # (lower case: it reads as a statement, ``with stopsignals.held():``)
    """Hold stops while a child is started and recorded, so a stop never lands between the
    fork and the record its cleanup kills from (an orphan outliving the command).

    A stop that arrives meanwhile is noted by a stand-in handler and raised again on exit, to
    the handler that was there. The signal mask is left alone: a mask is inherited through
    exec, and a tmux server started here would pass stops held to every crew it runs. Off the
    main thread nothing is held: stops are handled in the main thread, never in this one."""

    def __enter__(self) -> None:
        self._caught: list[int] = []
        self._old: dict[int, Handler] | None = None
        try:
            self._old = {int(sig): signal.signal(sig, self._note) for sig in STOP_SIGNALS}
        except ValueError:  # not the main thread
            self._old = None

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self._caught.append(signum)

    def __exit__(self, *exc: object) -> None:
        if self._old is None:
            return
        restore(self._old)
        if self._caught:
            signal.raise_signal(self._caught[0])


def restore(previous: Mapping[int, Handler]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


class trapped:
    """``with trapped(make):`` turns a stop into ``make(signum)`` raised in the main thread,
    with stops held while the handlers go in and after the first one lands (the cleanup of
    the ``with`` body's caller is never interrupted by a second). Outside the main thread it
    does nothing (signals are only delivered there)."""

    def __init__(self, make: Callable[[int], BaseException] = Stopped) -> None:
        self.make = make
        self.previous: dict[int, Handler] | None = None
        self.fired: int | None = None

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        block()
        self.fired = signum
        raise self.make(signum)

    def __enter__(self) -> trapped:
        import threading

        if threading.current_thread() is threading.main_thread():
            block()
            self.previous = install(self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            restore(self.previous)
            self.previous = None
            if self.fired is None:
                unblock()  # (after a stop they stay held: the caller is cleaning up to exit)


def early(line: str) -> None:
    """Until replaced, a stop writes ``line.format(signal=NAME)`` and exits 128 + signal: the
    first thing a long-running command does, before its imports."""

    def stopped(signum: int, frame: FrameType | None) -> None:
        text = line.format(signal=NAMES.get(signum, str(signum))) + "\n"
        try:  # noqa: SIM105 - contextlib is not imported yet
            os.write(1, text.encode())
        except OSError:
            pass  # nobody is reading: the exit status still says what happened
        os._exit(128 + signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, stopped)


__all__ = ["NAMES", "STOP_SIGNALS", "Stopped", "block", "early", "held", "install", "raise_stopped",
           "restore", "trapped", "unblock"]
