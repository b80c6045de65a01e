"""Direct mode: the watcher writes its reason line to its arm's own stdout.

An arm that started its watcher passes it a copy of the arm's stdout and a pipe
(``FM_WATCH_DIRECT_FD=<out>,<go>``). Once the arm's status line is out, the arm writes on the
pipe; a watcher that closes after that writes its reason line to the arm's stdout itself, so the
line reaches the harness with one process wake-up (the watcher's) instead of two (the watcher's,
then the arm's relay). Before the line the watcher tells its arm on its own stdout
(``direct: <reason>``), and after it ``direct: sent``: an arm that heard of a reason but not that
it was sent (the watcher died between, or the write failed) writes the line itself, so a wake is
never lost. A watcher closing before the go relays as always: the status line precedes the
reason on the arm's stdout either way.

The arm keeps its end of the pipe open while it lives. A thread of the watcher waits on the
pipe: it hears the go, and when the pipe ends (the arm is gone) it closes the watcher's copy of
the arm's stdout at once, whatever the watcher is busy with, so a harness reading that stream to
its end never waits on a watcher that outlived its arm.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, MutableMapping

import attrs

from firstmate.base.stopsignals import STOP_SIGNALS

DIRECT_FD_ENV = "FM_WATCH_DIRECT_FD"
#: On the watcher's stdout: the reason it is writing to the arm's stdout itself ...
DIRECT_PREFIX = "direct: "
#: ... and, once that line was written, this.
DIRECT_SENT = "direct: sent"


@attrs.define(eq=False)
class DirectOut:
    """The arm's stdout (None once let go) and the pipe its go comes on."""

    out: int | None
    go: int
    #: The arm said go (its status line is out) and is still there.
    live: bool = False
    #: Held by whoever uses or closes ``out``: a closed number is never written to.
    _lock: threading.Lock = attrs.Factory(threading.Lock)

    @classmethod
    def from_env(cls, env: MutableMapping[str, str]) -> DirectOut | None:
        """Take the two descriptors out of *env* (checks must not inherit them) and start
        listening on the pipe."""
        fields = env.pop(DIRECT_FD_ENV, "").strip().split(",")
        if len(fields) != 2 or not all(f.isascii() and f.isdigit() and int(f) > 2 for f in fields):
            return None
        out, go = int(fields[0]), int(fields[1])
        try:
            for fd in (out, go):
                os.set_inheritable(fd, False)
                os.fstat(fd)
        except OSError:
            return None
        direct = cls(out, go)
        # The listener never takes a stop signal: they are the main thread's, and a close
        # holds them blocked there.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            threading.Thread(target=direct._listen, name="fm-direct", daemon=True).start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        return direct

    def _listen(self) -> None:
        while True:
            try:
                said = os.read(self.go, 8)
            except InterruptedError:
                continue
            except OSError:
                said = b""
            with self._lock:
                if said and self.out is not None:
                    self.live = True
                    continue
                self.live = False
                if self.out is not None:
                    os.close(self.out)
                    self.out = None
            return

    def write(self, reason: str, say: Callable[[str], bool]) -> bool | None:
        """Write *reason* to the arm's stdout, announced and confirmed through *say*: True
        when announced, False when *say* failed, None (nothing said) when not live."""
        with self._lock:
            if not self.live or self.out is None:
                return None
            if not say(DIRECT_PREFIX + reason):  # the arm hears of it first
                return False
            try:
                os.write(self.out, (reason + "\n").encode("utf-8", "replace"))
            except OSError:
                return True  # (no "sent": the arm writes the line itself)
        say(DIRECT_SENT)
        return True


def deliver(direct: DirectOut | None, say: Callable[[str], bool], reason: str) -> bool:
    """Write *reason* for the harness: directly when the arm said go, else through *say* (our
    stdout, which the arm relays). False when our stdout is gone."""
    done = direct.write(reason, say) if direct is not None else None
    return say(reason) if done is None else done


__all__ = ["DIRECT_FD_ENV", "DIRECT_PREFIX", "DIRECT_SENT", "DirectOut", "deliver"]
